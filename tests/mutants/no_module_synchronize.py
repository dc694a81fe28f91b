"""A backend whose device module has no synchronize: the PrivateUse1 device-module contract does
not ask for one (OpenReg's has none), so the suite must synchronize through torch.accelerator.

torch.neuron is replaced by a view of the real module that lacks the function; the module
itself is left alone (its own code keeps calling it)."""

import types

import torch

_real = torch.neuron


class _WithoutSynchronize(types.ModuleType):
    def __getattr__(self, name: str) -> object:
        if name == "synchronize":
            raise AttributeError(f"module {_real.__name__!r} has no attribute 'synchronize'")
        return getattr(_real, name)


torch.neuron = _WithoutSynchronize(_real.__name__, _real.__doc__)
