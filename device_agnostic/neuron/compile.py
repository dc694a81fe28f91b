"""torch.compile for neuron: inductor's C++/OpenMP CPU code generation on device memory.

Neuron device memory is host memory (csrc/NeuronDeviceAllocator.cpp), so the kernels inductor
generates for the CPU read and write neuron tensors through their data pointers unchanged. This
module tells inductor and dynamo so:

- inductor: ``register_backend_for_device("neuron", CppScheduling, PythonWrapperCodegen,
  CppWrapperCpu)``; buffers the generated wrapper allocates are created on the current neuron
  device by ``device_agnostic.neuron._C._empty_strided`` (what ``empty_strided_cpu`` is to the
  CPU: no argument parsing, no dispatch), so the outputs and saved activations of a compiled
  graph are neuron tensors;
- dynamo: a ``DeviceInterface`` for "neuron" built on ``torch.neuron``;
- ``torch.compile(backend="neuron")``: the dynamo backend of that name (entry point group
  ``torch_dynamo_backends``), which is inductor.

Nothing here is imported by ``import torch``: inductor looks up ``torch.neuron.Scheduling`` (and
the wrapper classes) the first time it initialises its device registry, and ``torch.neuron``
answers that lookup by calling :func:`register` (see ``__getattr__`` in ``__init__.py``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files

DEVICE = "neuron"


@dataclass
class NeuronCompileProperties:
    """What inductor asks of a device's properties (a CPU-like device: OpenMP threads)."""

    multi_processor_count: int
    name: str = "neuron"


class NeuronInterface(DeviceInterface):
    """dynamo's and inductor's view of the runtime: ``torch.neuron`` under DeviceInterface names."""

    device = torch.neuron.device  # type: ignore[assignment]
    Event = torch.neuron.Event  # type: ignore[assignment]
    Stream = torch.neuron.Stream  # type: ignore[assignment]

    class Worker:
        # Compile workers may run in subprocesses; nothing here touches the runtime.
        @staticmethod
        def set_device(device: int) -> None:
            pass

        @staticmethod
        def current_device() -> int:
            return 0

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> NeuronCompileProperties:
            return NeuronCompileProperties(multi_processor_count=os.cpu_count() or 1)

    current_device = staticmethod(torch.neuron.current_device)
    set_device = staticmethod(torch.neuron.set_device)
    device_count = staticmethod(torch.neuron.device_count)
    is_available = staticmethod(torch.neuron.is_available)
    stream = staticmethod(torch.neuron.stream)
    current_stream = staticmethod(torch.neuron.current_stream)
    set_stream = staticmethod(torch.neuron.set_stream)
    synchronize = staticmethod(torch.neuron.synchronize)
    memory_allocated = staticmethod(torch.neuron.memory_allocated)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        previous = torch.neuron.current_device()
        if device >= 0 and device != previous:
            torch.neuron.set_device(device)
        return previous

    exchange_device = maybe_exchange_device

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.neuron.set_stream(
            torch.neuron.Stream(
                stream_id=stream_id, device_index=device_index, device_type=device_type
            )
        )

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        # Generated CPU kernels run on the calling thread, in stream order (csrc/NeuronStream.h).
        return 0

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False


class NeuronPythonWrapperCodegen(PythonWrapperCodegen):
    """inductor's Python wrapper, calling the C++ kernels on neuron as it does on the CPU."""

    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: str | None,
        parent_wrapper: PythonWrapperCodegen | None,
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            return PythonWrapperCodegen.create(
                is_subgraph, subgraph_name, parent_wrapper, partition_signatures
            )
        return NeuronPythonWrapperCodegen()

    def _generate_kernel_call_helper(
        self,
        kernel_name: str,
        call_args: Any,
        *,
        device: Any = None,
        triton: bool = True,
        **kwargs: Any,
    ) -> None:
        from torch._inductor.virtualized import V

        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == DEVICE:
            # A C++ kernel takes the device pointers as they are (device memory is host memory)
            # and runs on the calling thread: no stream argument, as on the CPU. In asynchronous
            # mode (NEURON_LAUNCH_BLOCKING=0) the current stream may still have queued work that
            # writes its inputs (eager ops before the graph, the graph's own extern kernels) or
            # reads its outputs' memory: wait for it first. Always emitted (a no-op when
            # synchronous), since inductor's caches share generated code between the modes.
            self.add_import_once(
                "from device_agnostic.neuron._C import _drain_current_stream as neuron_drain_stream"
            )
            self.writeline(
                f"neuron_drain_stream({device.index if device.index is not None else -1})"
            )
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(
            kernel_name, call_args, device=device, triton=triton, **kwargs
        )

    def make_allocation(
        self,
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        shape: Any,
        stride: Any,
        allocation_shape: Any = None,
        is_pinned: bool = False,
    ) -> str:
        # inductor gives the CPU and CUDA a C++ allocation call (empty_strided_cpu/_cuda) and
        # every other device torch.empty_strided(..., device=...), whose argument parsing and
        # dispatch cost about 1.7 us more per buffer: neuron gets its own C++ call.
        if device.type != DEVICE or torch._inductor.config.test_configs.track_memory_lifecycle:
            return super().make_allocation(
                name, device, dtype, shape, stride, allocation_shape, is_pinned
            )
        self.add_import_once(
            "from device_agnostic.neuron._C import _empty_strided as empty_strided_neuron"
        )
        allocation_shape = shape if allocation_shape is None else allocation_shape
        allocation = self.codegen_python_shape_tuple(allocation_shape)
        strides = self.codegen_python_shape_tuple(stride)
        line = f"{name} = empty_strided_neuron({allocation}, {strides}, {dtype})"
        if self.codegen_python_shape_tuple(shape) != allocation:
            line += f".as_strided({self.codegen_python_shape_tuple(shape)}, {strides})"
        return line


class _CodegenCacheKey(CustomGraphModulePass):
    """A pass that changes nothing: its uuid, a hash of this file, enters the key of inductor's
    on-disk FX graph cache, which otherwise ignores a device's wrapper codegen, so code generated
    by another version of this file (e.g. without the stream drain above) is never reused."""

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        pass

    def uuid(self) -> bytes:
        # stock_torch.py changes what inductor generates on stock torch: it enters the key too.
        return get_hash_for_files(
            (__file__, os.path.join(os.path.dirname(__file__), "stock_torch.py"))
        )


def neuron_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
    """``torch.compile(backend="neuron")``: inductor, generating C++ kernels for neuron tensors."""
    register()
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, **kwargs)


@functools.cache
def register() -> None:
    """Register neuron with dynamo's device interfaces and inductor's code generators (once)."""
    register_interface_for_device(DEVICE, NeuronInterface)
    for index in range(torch.neuron.device_count()):
        register_interface_for_device(f"{DEVICE}:{index}", NeuronInterface)

    from torch._inductor.codegen.common import (
        get_scheduling_for_device,
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    if get_scheduling_for_device(DEVICE) is None:
        register_backend_for_device(
            DEVICE,
            CppScheduling,
            NeuronPythonWrapperCodegen,
            CppWrapperCpu,
            WrapperFxCodegen,
            device_custom_pass=_CodegenCacheKey(),
        )
    _use_the_cpu_rules_in_inductor()
    # The wrapper's device-side snippets (streams, guards) are the CPU's: kernels run on the
    # calling thread.
    register_device_op_overrides(DEVICE, CpuDeviceOpOverrides())


def _use_the_cpu_rules_in_inductor() -> None:
    """Give neuron inductor's C++ code-generation rules.

    inductor picks the C++ rules (fusion, loop reindexing, dtype propagation of the generated
    expressions) by asking whether a node's device is "cpu" and which backend the device uses;
    for any other device it answers with the GPU/Triton rules, which crash or miscompile C++
    kernels. With patch 0051 of the series (``torch._inductor.utils.device_uses_cpp_backend``)
    registering ``CppScheduling`` for neuron, as :func:`register` does, is the declaration and
    nothing else is needed. Stock torch lacks it: ``stock_torch`` replaces the predicates.
    """
    from torch._inductor import utils

    if not hasattr(utils, "device_uses_cpp_backend"):
        from . import stock_torch

        stock_torch.treat_as_cpu_in_inductor(DEVICE)


def _inductor_lookup(name: str) -> Any:
    """Answer inductor's ``torch.neuron.<name>`` lookups (codegen/common.py) after registering."""
    register()
    from torch._inductor.codegen.common import get_wrapper_codegen_for_device

    if name == "Scheduling":
        # register() has registered neuron completely, with its cache-key pass. Answering None
        # makes inductor's init_backend_registration skip its own registration of the
        # PrivateUse1 backend (it catches the RuntimeError that _get_custom_mod_func raises),
        # which would register the same classes again but drop the pass.
        return None
    if name == "PythonWrapperCodegen":
        return get_wrapper_codegen_for_device(DEVICE)
    if name == "CppWrapperCodegen":
        return get_wrapper_codegen_for_device(DEVICE, cpp_wrapper=True)
    return get_wrapper_codegen_for_device(DEVICE, fx_wrapper=True)
