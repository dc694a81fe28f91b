"""torch.neuron: the reference PrivateUse1 backend, an AWS NeuronCore emulated on host memory.

``import torch`` loads this module through the ``torch.backends`` entry point (unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``); importing it registers the backend by itself too. From then
on ``torch.accelerator.current_accelerator()`` is ``torch.device("neuron")``, tensors live on
"neuron:N", and this module is ``torch.neuron`` / ``torch.get_device_module("neuron")``.

This module implements the device-module contract of ``torch.utils.rename_privateuse1_backend``
and the public torch.cuda-style names that device-generic code reaches through
``torch.get_device_module()``. It deliberately has none of torch.cuda's private attributes
(such as ``_initialized``): code that reads those is CUDA-specific.

Environment:
    NEURON_RT_VISIBLE_CORES   the visible cores, "0-3", "0,2,5" or "1" (default: 2 devices)
    NEURON_DEVICE_MEMORY      per-device capacity, e.g. "512MiB" (default: 16GiB)
    NEURON_AUTOGRAD_DEVICE_THREADS
                              1: backward runs on torch's autograd device thread (default 0:
                              on the calling thread, see autograd.py)
"""

from __future__ import annotations


def _autoload() -> None:
    """The ``torch.backends`` entry point, called at the end of ``import torch``.

    Importing this module registers the backend; nothing is left to do here. It is defined
    before ``import torch`` so that torch's autoload finds it when this module is what imports
    torch first (``python -m device_agnostic.neuron.demo``).
    """


import sys  # noqa: E402

import torch  # noqa: E402

from . import _C  # noqa: E402, F401 - loads the runtime: kernels, hooks, guard and allocators
from ._device import (  # noqa: E402
    NeuronDeviceProperties,
    _is_in_bad_fork,
    _lazy_init,
    device,
    device_count,
    get_amp_supported_dtype,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    set_device,
    synchronize,
)
from ._device import current_device as current_device  # noqa: E402
from .memory import (  # noqa: E402
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from .random import (  # noqa: E402
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .storage import storage_classes as _storage_classes  # noqa: E402
from .streams import (  # noqa: E402
    Event,
    Stream,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

# torch.neuron.FloatStorage, ...: what tensor.storage_type() answers, as torch.cuda's (storage.py).
globals().update(_storage_classes())

__all__ = [
    "Event",
    "NeuronDeviceProperties",
    "Stream",
    "current_device",
    "current_stream",
    "default_generators",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
    "_is_in_bad_fork",
    "_lazy_init",
]

BACKEND_NAME = "neuron"


def __getattr__(name: str) -> object:
    """torch.compile's lazy hook: inductor looks up ``torch.neuron.Scheduling`` and the wrapper
    code generators when it first initialises its devices; answer by registering neuron with
    inductor and dynamo (compile.py), so that ``import torch`` never imports inductor."""
    if name in ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen"):
        from . import compile as _compile

        return _compile._inductor_lookup(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register() -> None:
    """Rename PrivateUse1 to "neuron" and install torch.neuron; idempotent."""
    current_name = torch._C._get_privateuse1_backend_name()
    if current_name != BACKEND_NAME:
        if current_name != "privateuseone":
            raise RuntimeError(
                f"Cannot register the neuron backend: PrivateUse1 is already taken by "
                f"{current_name!r}. Only one PrivateUse1 backend can be loaded per process; "
                "set TORCH_DEVICE_BACKEND_AUTOLOAD=0 and import the one you want."
            )
        torch.utils.rename_privateuse1_backend(BACKEND_NAME)
    if getattr(torch, BACKEND_NAME, None) is not sys.modules[__name__]:
        torch._register_device_module(BACKEND_NAME, sys.modules[__name__])
    if not hasattr(torch.Tensor, BACKEND_NAME):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
        )
    # NeuronCores compute natively in bfloat16: make it autocast's default, as CUDA's is float16.
    torch.set_autocast_dtype(BACKEND_NAME, torch.bfloat16)
    # torch.distributed: the "neuron" process-group backend (gloo over device memory).
    from . import distributed

    distributed._register()
    # backward() over neuron tensors runs on the calling thread, as on the CPU (autograd.py).
    from . import autograd

    autograd.install()
    # torch.multiprocessing: neuron tensors shared between processes (sharing.py).
    from . import sharing

    sharing.install()


_register()
