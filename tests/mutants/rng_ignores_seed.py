"""An RNG that ignores the seed: seeding neuron does nothing (torch.manual_seed included, which
seeds accelerators through torch.neuron.manual_seed_all)."""

import torch


def _ignore(*args: object, **kwargs: object) -> None:
    return None


torch.neuron.manual_seed = _ignore
torch.neuron.manual_seed_all = _ignore
