"""Item 6: per-device default generators, seeding, state round trips and fork_rng."""

from __future__ import annotations

import pytest
import torch


def draw(device: str = "neuron:0", n: int = 8) -> torch.Tensor:
    return torch.rand(n, device=device).cpu()


def test_same_seed_gives_same_numbers():
    torch.neuron.manual_seed(1234)
    first = draw()
    torch.neuron.manual_seed(1234)
    assert torch.equal(first, draw())
    torch.neuron.manual_seed(4321)
    assert not torch.equal(first, draw())


def test_torch_manual_seed_seeds_every_neuron_device():
    torch.manual_seed(99)
    expected = torch.rand(8)  # same engine as the CPU generator
    torch.manual_seed(99)
    assert torch.equal(draw("neuron:0"), expected)
    assert torch.equal(draw("neuron:1"), expected)
    assert torch.neuron.initial_seed() == 99


def test_devices_have_independent_generators():
    torch.neuron.manual_seed_all(7)
    state_of_device_0 = torch.neuron.get_rng_state(0)
    draw("neuron:1", 1000)
    assert torch.equal(torch.neuron.get_rng_state(0), state_of_device_0)
    assert not torch.equal(torch.neuron.get_rng_state(1), state_of_device_0)


def test_rng_state_round_trip_replays_the_numbers():
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = draw()
    torch.neuron.set_rng_state(state)
    assert torch.equal(first, draw())


def test_rng_state_all_round_trip():
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    first = [draw("neuron:0"), draw("neuron:1")]
    torch.neuron.set_rng_state_all(states)
    assert torch.equal(first[0], draw("neuron:0"))
    assert torch.equal(first[1], draw("neuron:1"))


def test_seed_and_seed_all_reseed_randomly():
    torch.neuron.seed()
    first = torch.neuron.initial_seed()
    torch.neuron.seed_all()
    assert torch.neuron.initial_seed() != first
    assert torch.neuron.default_generators[0].initial_seed() == (
        torch.neuron.default_generators[1].initial_seed()
    )


def test_fork_rng_restores_the_neuron_state():
    torch.neuron.manual_seed(5)
    before = torch.neuron.get_rng_state()
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        draw(n=100)
    assert torch.equal(torch.neuron.get_rng_state(), before)


def test_explicit_generator_on_neuron():
    generator = torch.Generator(device="neuron")
    assert generator.device == torch.device("neuron:0")
    generator.manual_seed(11)
    first = torch.randn(5, device="neuron", generator=generator).cpu()
    generator.manual_seed(11)
    assert torch.equal(first, torch.randn(5, device="neuron", generator=generator).cpu())


def test_cpu_generator_with_neuron_tensor_is_rejected():
    with pytest.raises(RuntimeError, match="Expected a 'neuron' device type for generator"):
        torch.rand(3, device="neuron", generator=torch.Generator())


def test_dropout_draws_from_the_neuron_generator():
    ones = torch.ones(64, device="neuron")
    torch.neuron.manual_seed(3)
    first = torch.nn.functional.dropout(ones, 0.5).cpu()
    torch.neuron.manual_seed(3)
    torch.rand(1000)  # advancing the CPU generator must not matter
    assert torch.equal(first, torch.nn.functional.dropout(ones, 0.5).cpu())
    assert set(first.unique().tolist()) == {0.0, 2.0}


def test_distributions_are_sane():
    torch.neuron.manual_seed(0)
    uniform = torch.rand(100_000, device="neuron")
    normal = torch.randn(100_000, device="neuron")
    assert 0.49 < uniform.mean().item() < 0.51
    assert 0.0 <= uniform.min().item() and uniform.max().item() < 1.0
    assert abs(normal.mean().item()) < 0.02
    assert 0.98 < normal.std().item() < 1.02
    integers = torch.randint(0, 10, (10_000,), device="neuron")
    assert set(integers.unique().cpu().tolist()) == set(range(10))


@pytest.mark.parametrize(
    ("bad_state", "error"),
    [
        (torch.zeros(3, dtype=torch.uint8), RuntimeError),
        (torch.zeros(5056, dtype=torch.float32), TypeError),
        ("not a tensor", TypeError),
    ],
)
def test_malformed_rng_state_is_a_clear_error(bad_state, error):
    before = torch.neuron.get_rng_state()
    with pytest.raises(error):
        torch.neuron.set_rng_state(bad_state)
    assert torch.equal(torch.neuron.get_rng_state(), before)
