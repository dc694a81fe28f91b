"""The one place where the backend replaces private torch functions, for stock torch only.

Each workaround here names what retires it. Nothing in this module runs on a torch that carries
the fix: the caller checks for the supported way first.

- ``treat_as_cpu_in_inductor``: retired by patch
  ``0051-inductor-cpp-scheduling-device-cpu-rules.patch`` of the series (a device that registers
  ``CppScheduling`` gets the CPU's code-generation rules; ``torch._inductor.utils`` then has
  ``device_uses_cpp_backend``). ``compile.py`` calls it only when that name is missing.
- ``share_storages_of_device``: no patch retires it yet. Stock ``UntypedStorage.share_memory_``
  skips every device but the CPU (and meta), and ``UntypedStorage.is_shared`` answers only for
  the CPU's shared-memory allocators and CUDA; neither asks the device's backend. The clean fix
  is upstream's RFC pytorch/pytorch#192099 (IPC hooks on ``PrivateUse1HooksInterface``, PRs
  #193217, #194855, #196295): there, as on CUDA, any device allocation is exportable and
  ``share_memory_`` stays a no-op. ``sharing.py`` installs it.

The autograd engine swap (``autograd.py``, backward on the calling thread) is the other
replacement of a torch internal (``Variable._execution_engine``); it stays in its own module
because it is not a missing Python hook but a C++ engine policy, which upstream's open
pytorch/pytorch#192004 ("Engine reuses calling thread when the whole graph is on one device")
would make the default, retiring it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

RETIRED_BY = "0051-inductor-cpp-scheduling-device-cpu-rules.patch"


def treat_as_cpu_in_inductor(device_type: str) -> None:
    """Make inductor's "is this the CPU?" questions answer yes for ``device_type`` too.

    CppScheduling generates the same code for the CPU and a host-memory device, but stock
    inductor picks the C++ rules (fusion, loop reindexing, dtype propagation) by asking whether
    a node's device is "cpu" (``ir.is_cpu``, ``BaseSchedulerNode.is_cpu``) and which backend
    the current device uses (``utils.get_current_backend``, "triton" for a device it does not
    know): with the GPU rules the scheduler crashes on CPU-shaped loops and dynamic-shape
    kernels lose their dtypes. The three predicates are replaced for the whole process, in
    every module that imported them by name.
    """
    from torch._inductor import ir, scheduler, utils
    from torch._inductor.codegen import common
    from torch._inductor.kernel import mm_common

    cpu_like = ("cpu", device_type)

    def is_cpu(x: Any) -> bool:
        return ir.get_device_type(x) in cpu_like

    def node_is_cpu(self: scheduler.BaseSchedulerNode) -> bool:
        device = self.get_device()
        return device is not None and device.type in cpu_like

    stock_get_current_backend = utils.get_current_backend

    def get_current_backend(device: str | None = None) -> str:
        if not device:
            from torch._inductor.virtualized import V

            device = V.graph.get_current_device_or_throw().type
        return stock_get_current_backend("cpu" if device == device_type else device)

    ir.is_cpu = is_cpu
    scheduler.BaseSchedulerNode.is_cpu = node_is_cpu
    for module in (utils, common, scheduler, mm_common):
        module.get_current_backend = get_current_backend


def share_storages_of_device(
    device_type: str,
    share: Callable[[torch.UntypedStorage], None],
    is_shared: Callable[[torch.UntypedStorage], bool],
) -> None:
    """Make ``torch.UntypedStorage.share_memory_`` and ``is_shared`` call ``share`` and
    ``is_shared`` for storages of ``device_type`` (every other storage keeps torch's methods).

    ``Tensor.share_memory_()``, ``Module.share_memory()`` and ``Tensor.is_shared()`` reach the
    device through these two methods (via ``TypedStorage``); stock torch makes the first a
    silent no-op and the second False for a PrivateUse1 storage. Idempotent.
    """
    stock_share_memory_ = torch.UntypedStorage.share_memory_
    stock_is_shared = torch.UntypedStorage.is_shared
    if getattr(stock_share_memory_, "_shared_device_type", None) == device_type:
        return

    @functools.wraps(stock_share_memory_)
    def share_memory_(self: torch.UntypedStorage, *args: Any, **kwargs: Any):
        if self.device.type == device_type:
            share(self)
            return self
        return stock_share_memory_(self, *args, **kwargs)

    @functools.wraps(stock_is_shared)
    def storage_is_shared(self: torch.UntypedStorage) -> bool:
        if self.device.type == device_type:
            return is_shared(self)
        return stock_is_shared(self)

    share_memory_._shared_device_type = device_type  # type: ignore[attr-defined]
    torch.UntypedStorage.share_memory_ = share_memory_
    torch.UntypedStorage.is_shared = storage_is_shared
