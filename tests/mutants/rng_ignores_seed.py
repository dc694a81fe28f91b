"""An RNG that ignores the seed: seeding neuron does nothing (torch.manual_seed included)."""

import torch


def _ignore(*args: object, **kwargs: object) -> None:
    return None


torch.neuron.manual_seed = _ignore
torch.neuron.manual_seed_all = _ignore
_generator_manual_seed = torch.Generator.manual_seed


def _manual_seed(self: torch.Generator, seed: int) -> torch.Generator:
    if self.device.type == "neuron":
        return self
    return _generator_manual_seed(self, seed)


torch.Generator.manual_seed = _manual_seed
