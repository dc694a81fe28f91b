"""Random numbers: seeding reproduces the numbers, generator states round-trip, fork_rng restores,
devices draw from their own generators, distributions have the right moments and bounds, and a
malformed state is refused.

The values themselves are the backend's own (CUDA's Philox differs from the CPU's Mersenne
Twister): the tests compare a backend with itself, and distributions with their definitions.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from .assertions import reproducer
from .backend import Backend
from .requirements import require, require_devices

SEEDS = st.integers(0, 2**63 - 1)
SAMPLES = 100_000  # means are checked to 10 standard errors, standard deviations to 3 %


# ---- the backend's default generators, through its device module ----------------------------


def _rng_module(backend: Backend):
    """Where the default generators are seeded and read: the device module (torch.cuda, ...), or
    torch itself for the CPU (torch.cpu has no RNG functions; torch.manual_seed is the CPU's)."""
    if backend.is_cpu:
        return torch
    module = backend.module
    missing = [
        name
        for name in ("manual_seed", "get_rng_state", "set_rng_state", "initial_seed")
        if not hasattr(module, name)
    ]
    assert not missing, f"{module.__name__} lacks {missing}, which every device module provides"
    return module


def _get_state(backend: Backend, index: int = 0) -> torch.Tensor:
    if backend.is_cpu:
        return torch.get_rng_state()
    return backend.module.get_rng_state(index)


def _set_state(backend: Backend, state: torch.Tensor, index: int = 0) -> None:
    if backend.is_cpu:
        torch.set_rng_state(state)
    else:
        backend.module.set_rng_state(state, index)


def _draw(device: torch.device, generator: torch.Generator | None = None) -> dict:
    """A sample of each random operator that draws from the device's generator."""
    return {
        "rand": torch.rand(64, device=device, generator=generator),
        "randn": torch.randn(64, device=device, generator=generator),
        "randint": torch.randint(0, 2**20, (64,), device=device, generator=generator),
        "randperm": torch.randperm(50, device=device, generator=generator),
        "normal_": torch.empty(64, device=device).normal_(3.0, 2.0, generator=generator),
        "bernoulli": torch.bernoulli(torch.full((64,), 0.5, device=device), generator=generator),
    }


def _assert_same_draws(first: dict, second: dict, how: str) -> None:
    differ = [name for name in first if not torch.equal(first[name].cpu(), second[name].cpu())]
    assert not differ, f"{how}, yet {', '.join(differ)} drew different numbers the second time"


def _assert_different_draws(first: dict, second: dict, how: str) -> None:
    same = [
        name
        for name in ("rand", "randn", "randint")
        if torch.equal(first[name].cpu(), second[name].cpu())
    ]
    assert not same, f"{how}, yet {', '.join(same)} drew the same numbers both times"


def _devices(backend: Backend) -> list[torch.device]:
    return [backend.device(i) for i in range(min(backend.device_count, 2))]


# ---- seeding -----------------------------------------------------------------------------------


@given(seed=SEEDS)
@example(seed=0)
def test_torch_manual_seed_reproduces_the_numbers_on_every_device(backend, seed):
    for device in _devices(backend):
        torch.manual_seed(seed)
        first = _draw(device)
        torch.manual_seed(seed)
        second = _draw(device)
        _assert_same_draws(
            first, second, f"torch.manual_seed({seed}) was called before each draw on {device}"
        )
        _assert_different_draws(first, _draw(device), f"draws on {device} continued the sequence")


@given(seed=SEEDS)
def test_device_module_manual_seed_reproduces_the_numbers(backend, device, seed):
    module = _rng_module(backend)
    module.manual_seed(seed)
    assert module.initial_seed() == seed, (
        f"{module.__name__}.initial_seed() is {module.initial_seed()} after manual_seed({seed})"
    )
    first = _draw(device)
    module.manual_seed(seed)
    second = _draw(device)
    _assert_same_draws(
        first, second, f"{module.__name__}.manual_seed({seed}) was called before each draw"
    )


@given(seed=SEEDS)
def test_a_seeded_generator_reproduces_the_numbers(device, seed):
    first = _draw(device, torch.Generator(device=device).manual_seed(seed))
    second = _draw(device, torch.Generator(device=device).manual_seed(seed))
    _assert_same_draws(first, second, f"two torch.Generator({str(device)!r}) were seeded {seed}")
    other = _draw(device, torch.Generator(device=device).manual_seed(seed ^ 1))
    _assert_different_draws(first, other, f"the seeds {seed} and {seed ^ 1} differ")


def test_device_module_manual_seed_seeds_only_the_current_device(backend):
    require_devices(backend)
    require(backend, "per_device_rng")
    module = backend.module
    state_of_1 = module.get_rng_state(1)
    torch.accelerator.set_device_index(0)
    module.manual_seed(1234)
    assert torch.equal(module.get_rng_state(1), state_of_1), (
        f"{module.__name__}.manual_seed seeds the current device (0) only, but it changed "
        "device 1's generator"
    )


def test_device_module_manual_seed_seeds_a_non_zero_current_device(backend):
    # Device 0 is current in almost every test: a manual_seed that always seeds device 0 (or
    # device 0's generator under another index) passes those and fails here.
    require_devices(backend)
    require(backend, "per_device_rng")
    module = backend.module
    previous = torch.accelerator.current_device_index()
    state_of_0 = module.get_rng_state(0)
    try:
        torch.accelerator.set_device_index(1)
        module.manual_seed(4321)
        first = _draw(backend.device(1))
        seeded = module.initial_seed()
        module.manual_seed(4321)
        second = _draw(backend.device(1))
    finally:
        torch.accelerator.set_device_index(previous)
    how = reproducer(
        f"torch.accelerator.set_device_index(1)\n{module.__name__}.manual_seed(4321)\n"
        f"print(torch.rand(4, device='{backend.device(1)}'), {module.__name__}.initial_seed())"
    )
    assert seeded == 4321, (
        f"with device 1 current, {module.__name__}.initial_seed() is {seeded} after "
        "manual_seed(4321)" + how
    )
    _assert_same_draws(
        first,
        second,
        f"with device 1 current, {module.__name__}.manual_seed(4321) was called before each draw "
        "on device 1",
    )
    assert torch.equal(module.get_rng_state(0), state_of_0), (
        f"with device 1 current, {module.__name__}.manual_seed changed device 0's generator" + how
    )


def test_device_module_manual_seed_all_seeds_every_device(backend):
    require_devices(backend)
    require(backend, "per_device_rng")
    module = backend.module
    module.manual_seed_all(77)
    first = [_draw(device) for device in _devices(backend)]
    module.manual_seed_all(77)
    for device, draws in zip(_devices(backend), first, strict=True):
        _assert_same_draws(
            draws,
            _draw(device),
            f"{module.__name__}.manual_seed_all(77) was called before each draw on {device}",
        )


# ---- generator states --------------------------------------------------------------------------


@given(seed=SEEDS, advance=st.integers(1, 5))
def test_rng_state_round_trip_replays_the_numbers(backend, device, seed, advance):
    # Seeded and advanced here, not left at the suite's seed-0 start: a state that restores
    # the seed but not the position in its sequence replays only from a freshly seeded one.
    _rng_module(backend).manual_seed(seed)
    for _ in range(advance):
        _draw(device)
    state = _get_state(backend)
    assert state.dtype == torch.uint8 and state.device.type == "cpu", (
        f"the RNG state is a {state.dtype} tensor on {state.device}; torch documents a CPU "
        "ByteTensor"
    )
    saved = state.clone()
    first = _draw(device)
    assert torch.equal(state, saved), "drawing changed a state returned earlier: it is not a copy"
    _set_state(backend, state)
    second = _draw(device)
    _assert_same_draws(first, second, "the RNG state was restored before the second draw")


@pytest.mark.parametrize("op", ["rand", "randn", "randint", "randperm", "normal_", "bernoulli"])
def test_random_ops_draw_from_the_device_generator(backend, device, op):
    """Each random operator on the device advances the device's default generator, and
    restoring that generator's state replays it: an operator that draws from another generator
    (the CPU's, copied to the device) leaves it untouched."""
    index = device.index or 0
    _rng_module(backend).manual_seed(123)
    state = _get_state(backend, index)
    first = _draw(device)[op].cpu()
    how = reproducer(
        f"state = {_rng_module(backend).__name__}.get_rng_state({index})\n"
        f"x = torch.rand(8, device='{device}')\n"
        f"print(torch.equal(state, {_rng_module(backend).__name__}.get_rng_state({index})))"
    )
    assert not torch.equal(_get_state(backend, index), state), (
        f"{op} on {device} left the device's generator state unchanged: it draws from another "
        "generator" + how
    )
    _set_state(backend, state, index)
    assert torch.equal(_draw(device)[op].cpu(), first), (
        f"{op} on {device} drew different numbers after the device's generator state was "
        "restored: it draws from another generator" + how
    )


def test_rng_state_all_round_trip_replays_the_numbers_on_every_device(backend):
    require_devices(backend)
    require(backend, "per_device_rng")
    module = backend.module
    states = module.get_rng_state_all()
    assert len(states) == backend.device_count, (
        f"get_rng_state_all() returned {len(states)} states for {backend.device_count} devices"
    )
    first = [_draw(device) for device in _devices(backend)]
    module.set_rng_state_all(states)
    for device, draws in zip(_devices(backend), first, strict=True):
        _assert_same_draws(draws, _draw(device), f"set_rng_state_all restored {device}'s state")


def test_generator_state_round_trip_replays_the_numbers(device):
    generator = torch.Generator(device=device).manual_seed(7)
    assert generator.device.type == device.type, (
        f"torch.Generator({str(device)!r}).device is {generator.device}"
    )
    state = generator.get_state()
    first = _draw(device, generator)
    generator.set_state(state)
    second = _draw(device, generator)
    _assert_same_draws(
        first, second, "Generator.set_state restored the state before the second draw"
    )


def test_an_explicit_generator_leaves_the_default_generator_alone(backend, device):
    before = _get_state(backend)
    _draw(device, torch.Generator(device=device).manual_seed(3))
    assert torch.equal(_get_state(backend), before), (
        "drawing with an explicit torch.Generator changed the default generator's state"
    )


@pytest.mark.parametrize("leave", ["normally", "by an exception"])
def test_fork_rng_restores_the_device_state(backend, device, leave):
    # The CPU's state is always forked; torch.cpu has no per-device RNG functions to fork.
    devices = [] if backend.is_cpu else list(range(backend.device_count))
    torch.manual_seed(11)
    expected = _draw(device)
    torch.manual_seed(11)
    try:
        with torch.random.fork_rng(devices=devices, device_type=backend.name):
            _draw(device)
            torch.manual_seed(99)
            if leave != "normally":
                raise KeyError("leave the block")
    except KeyError:
        pass
    after = _draw(device)
    _assert_same_draws(
        expected,
        after,
        f"fork_rng(device_type={backend.name!r}) was left "
        f"{leave} and should have restored the state",
    )


def test_drawing_on_one_device_leaves_the_others_generator_alone(backend):
    require_devices(backend)
    require(backend, "per_device_rng")
    module = backend.module
    torch.manual_seed(5)
    state_of_0 = module.get_rng_state(0)
    expected = _draw(backend.device(0))
    module.set_rng_state(state_of_0, 0)
    _draw(backend.device(1))
    assert torch.equal(module.get_rng_state(0), state_of_0), (
        "drawing on device 1 changed device 0's generator"
    )
    _assert_same_draws(expected, _draw(backend.device(0)), "only device 1 drew in between")


def test_a_cpu_generator_is_refused_for_a_device_tensor(backend, device):
    if backend.is_cpu:
        pytest.skip("not applicable: the backend is the CPU, whose generator is the right one")
    with pytest.raises(RuntimeError, match="generator"):
        torch.rand(4, device=device, generator=torch.Generator())
    with pytest.raises(RuntimeError, match="generator"):
        torch.empty(4, device=device).normal_(generator=torch.Generator())


# ---- distributions -----------------------------------------------------------------------------

# name: (sample on the device, mean, standard deviation, closed bounds or None)
DISTRIBUTIONS = {
    "rand": (lambda d: torch.rand(SAMPLES, device=d), 0.5, math.sqrt(1 / 12), (0.0, 1.0)),
    "randn": (lambda d: torch.randn(SAMPLES, device=d), 0.0, 1.0, None),
    "normal_(3, 2)": (lambda d: torch.empty(SAMPLES, device=d).normal_(3.0, 2.0), 3.0, 2.0, None),
    "uniform_(-2, 5)": (
        lambda d: torch.empty(SAMPLES, device=d).uniform_(-2.0, 5.0),
        1.5,
        7 / math.sqrt(12),
        (-2.0, 5.0),
    ),
    "exponential_(2)": (
        lambda d: torch.empty(SAMPLES, device=d).exponential_(2.0),
        0.5,
        0.5,
        (0.0, math.inf),
    ),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_distribution_has_the_documented_moments_and_bounds(device, name):
    sample, mean, std, bounds = DISTRIBUTIONS[name]
    values = sample(device).cpu().double()
    tolerance = 10 * std / math.sqrt(SAMPLES)
    assert abs(values.mean().item() - mean) < tolerance, (
        f"{name}: mean {values.mean().item():.4f}, expected {mean:.4f} +- {tolerance:.4f}"
    )
    assert abs(values.std().item() - std) < 0.03 * std, (
        f"{name}: standard deviation {values.std().item():.4f}, expected {std:.4f}"
    )
    if bounds is not None:
        low, high = bounds
        assert values.min().item() >= low and values.max().item() <= high, (
            f"{name}: values in [{values.min().item()}, {values.max().item()}], outside "
            f"[{low}, {high}]"
        )
    if name == "rand":
        assert values.max().item() < 1.0, "torch.rand drew 1.0; its interval is [0, 1)"


@given(low=st.integers(-(2**31), 2**31), span=st.integers(1, 40))
@example(low=0, span=1)
def test_randint_stays_in_its_half_open_interval_and_covers_it(device, low, span):
    values = torch.randint(low, low + span, (4000,), device=device)
    assert values.dtype == torch.int64, f"torch.randint has dtype {values.dtype}, not int64"
    drawn = set(values.cpu().tolist())
    outside = sorted(v for v in drawn if not low <= v < low + span)
    assert not outside, f"torch.randint({low}, {low + span}) drew {outside[:5]}"
    missing = sorted(set(range(low, low + span)) - drawn)
    assert not missing, f"torch.randint({low}, {low + span}) never drew {missing[:5]} in 4000 draws"


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_bernoulli_draws_ones_with_probability_p(device, p):
    values = torch.bernoulli(torch.full((SAMPLES,), p, device=device)).cpu()
    assert set(values.unique().tolist()) <= {0.0, 1.0}, "torch.bernoulli drew values besides 0, 1"
    tolerance = 10 * math.sqrt(p * (1 - p) / SAMPLES)
    mean = values.double().mean().item()
    assert abs(mean - p) <= tolerance, f"bernoulli({p}) drew ones at rate {mean:.4f}"
    rate = torch.empty(SAMPLES, device=device).bernoulli_(p).cpu().double().mean().item()
    assert abs(rate - p) <= tolerance, f"Tensor.bernoulli_({p}) drew ones at rate {rate:.4f}"


DROPOUT_P = [0.0, 0.2, 0.5, 0.8, 1.0]


@pytest.mark.parametrize("p", DROPOUT_P)
def test_dropout_zeroes_at_rate_p_and_scales_the_rest_by_1_over_1_minus_p(device, p):
    # Several p, not only 0.5: a kernel that scales by 1/p instead of 1/(1-p), or that draws
    # its mask with a fixed probability, is right at p = 0.5 alone.
    values = torch.nn.functional.dropout(
        torch.ones(SAMPLES, device=device), p=p, training=True
    ).cpu()
    zero_rate = (values == 0).double().mean().item()
    tolerance = 10 * math.sqrt(p * (1 - p) / SAMPLES)
    how = reproducer(
        f"y = torch.nn.functional.dropout(torch.ones({SAMPLES}, device='{device}'), p={p}, "
        "training=True).cpu()\nprint((y == 0).double().mean(), y[y != 0].unique())"
    )
    assert abs(zero_rate - p) <= tolerance, (
        f"dropout(p={p}) zeroed {zero_rate:.4f} of the elements; expected {p} +- {tolerance:.4f}"
        + how
    )
    kept = values[values != 0].unique().tolist()
    if p < 1:
        scale = 1 / (1 - p)
        wrong = [v for v in kept if not math.isclose(v, scale, rel_tol=1e-5)]
        assert not wrong, (
            f"dropout(p={p}) scaled the kept elements of a tensor of ones to {wrong[:3]}; "
            f"expected 1/(1-p) = {scale:.6f}" + how
        )


# ---- malformed states --------------------------------------------------------------------------

MALFORMED_STATES = {
    "too short": lambda state: state[: len(state) // 2].clone(),
    "empty": lambda state: state[:0].clone(),
    "float32": lambda state: state.float(),
}


@pytest.mark.parametrize("malformed", sorted(MALFORMED_STATES))
def test_a_malformed_rng_state_is_refused_and_the_generator_kept(backend, device, malformed):
    state = _get_state(backend)
    bad = MALFORMED_STATES[malformed](state)
    with pytest.raises((RuntimeError, TypeError, ValueError)):
        _set_state(backend, bad)
    after = _draw(device)
    _set_state(backend, state)
    _assert_same_draws(_draw(device), after, f"the {malformed} state was refused")


@pytest.mark.parametrize("malformed", sorted(MALFORMED_STATES))
def test_a_malformed_generator_state_is_refused_and_the_generator_kept(device, malformed):
    generator = torch.Generator(device=device).manual_seed(21)
    state = generator.get_state()
    with pytest.raises((RuntimeError, TypeError, ValueError)):
        generator.set_state(MALFORMED_STATES[malformed](state))
    after = _draw(device, generator)
    generator.set_state(state)
    _assert_same_draws(_draw(device, generator), after, f"the {malformed} state was refused")
