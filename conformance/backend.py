"""The backend under test: its device type, devices, device module and manifest."""

from __future__ import annotations

import dataclasses
import difflib
from types import ModuleType

import torch

from .manifest import Manifest


def torch_version() -> tuple[int, int]:
    """(major, minor) of the installed torch, for feature checks such as ``>= (2, 13)``."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def default_backend_name() -> str:
    """The current accelerator's device type, else "cpu"."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        current = accelerator.current_accelerator()
        if current is not None:
            return current.type
    return "cpu"


def registered_accelerators() -> list[str]:
    """The accelerator device types this torch has a backend for here: its PrivateUse1 backend
    (renamed: "neuron", "openreg") and those of CUDA, XPU, MPS, ... that are available."""
    names = []
    privateuse1 = torch._C._get_privateuse1_backend_name()
    if privateuse1 != "privateuseone" and getattr(torch, privateuse1, None) is not None:
        names.append(privateuse1)
    for name in ("cuda", "xpu", "mps", "mtia", "hpu"):
        module = getattr(torch, name, None)
        try:
            if module is not None and module.is_available():
                names.append(name)
        except Exception:
            continue
    return names


def check_device_type(name: str) -> None:
    """Raise RuntimeError naming the registered accelerators (and the likely one meant) if torch
    knows no device type ``name`` (a typo, or a backend that is not installed or imported)."""
    try:
        torch.device(name)
    except (RuntimeError, TypeError):
        pass
    else:
        return
    accelerators = registered_accelerators()
    close = difflib.get_close_matches(name, [*accelerators, "cpu"], n=1, cutoff=0.6)
    meant = f" Did you mean {close[0]!r}?" if close else ""
    raise RuntimeError(
        f"torch has no device type {name!r}: the accelerators registered here are "
        f"{', '.join(accelerators) or 'none'} (and cpu).{meant} If {name!r} is a backend, install "
        "it or import its extension (a conftest.py, or -p MODULE) before running the suite."
    )


@dataclasses.dataclass(frozen=True)
class Backend:
    """One backend under test (or the reference), as the tests see it."""

    name: str
    manifest: Manifest

    @property
    def capabilities(self):
        return self.manifest.capabilities

    @property
    def is_cpu(self) -> bool:
        return self.name == "cpu"

    @property
    def device_count(self) -> int:
        if self.is_cpu:
            return 1
        return self.module.device_count()

    @property
    def module(self) -> ModuleType:
        """The device module (torch.cuda, torch.neuron, ...); torch.cpu for the CPU."""
        return torch.get_device_module(self.name)

    def device(self, index: int = 0) -> torch.device:
        """The backend's device ``index`` (the CPU has only "cpu")."""
        if self.is_cpu:
            return torch.device("cpu")
        return torch.device(self.name, index)

    def check_usable(self) -> None:
        """Raise a clear error if the backend cannot run here."""
        if self.is_cpu:
            return
        try:
            module = self.module
        except (AttributeError, RuntimeError) as error:
            raise RuntimeError(
                f"Backend {self.name!r} is not registered with torch ({error}). Install or "
                "import its extension before running the suite."
            ) from error
        if not module.is_available() or module.device_count() < 1:
            raise RuntimeError(f"Backend {self.name!r} has no available device on this machine.")
