"""The backend under test: its device type, devices, device module and manifest."""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Backend:
    """One backend under test (or the reference), as the tests see it."""

    name: str
    manifest: Manifest

    @property
    def capabilities(self):  # noqa: ANN201 - conformance.manifest.Capabilities
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
