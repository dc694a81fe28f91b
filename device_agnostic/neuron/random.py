"""Random number generation: one default generator per device, the torch.cuda-style names.

A neuron generator's state is that of torch's CPU generator (mt19937), so the same seed gives
the same numbers on neuron as on the CPU, and each device draws from its own generator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from . import _C
from ._device import _DeviceLike, _is_in_bad_fork, device_count, device_index

# Seeding in a child forked after initialization is deferred, as torch.cuda does, so that
# torch.manual_seed() in a DataLoader worker does not raise; the child cannot use neuron.
_calls_deferred_in_bad_fork: list[Callable[[], None]] = []


def _run_or_defer(call: Callable[[], None]) -> None:
    if _is_in_bad_fork():
        _calls_deferred_in_bad_fork.append(call)
    else:
        call()


def default_generator(device: _DeviceLike = None) -> torch.Generator:
    """Return the default generator of ``device``."""
    return _C._default_generator(device_index(device))


class _DefaultGenerators:
    """``torch.neuron.default_generators``: indexable like torch.cuda.default_generators."""

    def __getitem__(self, index: int) -> torch.Generator:
        return default_generator(index)

    def __len__(self) -> int:
        return device_count()

    def __iter__(self):
        return (default_generator(i) for i in range(device_count()))


default_generators = _DefaultGenerators()


def get_rng_state(device: _DeviceLike = "neuron") -> torch.Tensor:
    """Return the RNG state of ``device`` as a CPU ByteTensor."""
    return default_generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    """Return the RNG state of every device."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "neuron") -> None:
    """Set the RNG state of ``device``; raises on a state that is not a neuron RNG state."""
    if not isinstance(new_state, torch.Tensor):
        raise TypeError(
            f"set_rng_state expects a torch.ByteTensor from get_rng_state(), "
            f"but got {type(new_state).__name__}."
        )
    state = new_state.clone(memory_format=torch.contiguous_format)
    index = device_index(device)
    _run_or_defer(lambda: default_generator(index).set_state(state))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Set the RNG state of every device, in device order."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    seed = int(seed)
    index = device_index(None)
    _run_or_defer(lambda: default_generator(index).manual_seed(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator (torch.manual_seed calls this)."""
    seed = int(seed)

    def seed_all_devices() -> None:
        for index in range(device_count()):
            default_generator(index).manual_seed(seed)

    _run_or_defer(seed_all_devices)


def seed() -> None:
    """Seed the current device's generator with a random number."""
    index = device_index(None)
    _run_or_defer(lambda: default_generator(index).seed())


def seed_all() -> None:
    """Seed every device's generator with one random number."""

    def seed_all_devices() -> None:
        random_seed = default_generator(0).seed()
        for index in range(1, device_count()):
            default_generator(index).manual_seed(random_seed)

    _run_or_defer(seed_all_devices)


def initial_seed() -> int:
    """Return the current device generator's initial seed."""
    return default_generator(None).initial_seed()
