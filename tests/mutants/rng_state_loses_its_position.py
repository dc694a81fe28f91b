"""A generator state round trip that keeps the seed and loses the position: set_rng_state on
neuron restores the state's seed and restarts its sequence (the offset is dropped). A state
taken right after seeding (the suite seeds before every test) replays correctly."""

import torch

_set_rng_state = torch.neuron.set_rng_state


def _restarting_set_rng_state(new_state, device="neuron"):
    _set_rng_state(new_state, device)
    index = torch.device(device).index if not isinstance(device, int) else device
    index = torch.accelerator.current_device_index() if index is None else index
    generator = torch.neuron.default_generators[index]
    generator.manual_seed(generator.initial_seed())


torch.neuron.set_rng_state = _restarting_set_rng_state
