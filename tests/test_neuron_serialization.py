"""Item 10: torch.save / torch.load round-trip neuron tensors with every map_location form."""

from __future__ import annotations

import io
import pickle

import pytest
import torch


def saved(obj: object) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


@pytest.fixture
def checkpoint() -> dict[str, torch.Tensor]:
    return {
        "on_0": torch.arange(6.0).reshape(2, 3).to("neuron:0"),
        "on_1": torch.arange(4, dtype=torch.int32).to("neuron:1"),
        "bf16": torch.ones(3, dtype=torch.bfloat16, device="neuron"),
    }


def test_round_trip_keeps_devices_and_values(checkpoint):
    loaded = torch.load(saved(checkpoint))
    for key, tensor in checkpoint.items():
        assert loaded[key].device == tensor.device
        assert loaded[key].dtype == tensor.dtype
        assert torch.equal(loaded[key].cpu(), tensor.cpu())


def test_location_tag_is_neuron_with_index(checkpoint):
    assert torch.serialization.location_tag(checkpoint["on_1"].untyped_storage()) == "neuron:1"


@pytest.mark.parametrize(
    ("map_location", "expected"),
    [
        ("cpu", {"on_0": "cpu", "on_1": "cpu"}),
        ("neuron:1", {"on_0": "neuron:1", "on_1": "neuron:1"}),
        (torch.device("neuron:0"), {"on_0": "neuron:0", "on_1": "neuron:0"}),
        ({"neuron:1": "neuron:0"}, {"on_0": "neuron:0", "on_1": "neuron:0"}),
        ({"neuron:0": "cpu"}, {"on_0": "cpu", "on_1": "neuron:1"}),
        (lambda storage, location: storage, {"on_0": "cpu", "on_1": "cpu"}),
    ],
    ids=["str-cpu", "str-neuron1", "device", "dict-to-neuron", "dict-to-cpu", "callable"],
)
def test_map_location_forms(checkpoint, map_location, expected):
    loaded = torch.load(saved(checkpoint), map_location=map_location)
    for key, device in expected.items():
        assert loaded[key].device == torch.device(device), key
        assert torch.equal(loaded[key].cpu(), checkpoint[key].cpu())


@pytest.mark.parametrize("map_location", [None, "cpu", "neuron:1"])
def test_weights_only_load(checkpoint, map_location):
    loaded = torch.load(saved(checkpoint), weights_only=True, map_location=map_location)
    assert torch.equal(loaded["on_0"].cpu(), checkpoint["on_0"].cpu())


def test_module_state_dict_round_trip():
    model = torch.nn.Linear(3, 2).to("neuron")
    restored = torch.nn.Linear(3, 2).to("neuron")
    restored.load_state_dict(torch.load(saved(model.state_dict()), weights_only=True))
    assert torch.equal(restored.weight.cpu(), model.weight.cpu())
    assert restored.weight.device.type == "neuron"


def test_views_are_saved_with_their_storage():
    base = torch.arange(10.0, device="neuron")
    loaded = torch.load(saved({"base": base, "view": base[2:5]}))
    loaded["view"].fill_(0)
    assert loaded["base"][2:5].cpu().tolist() == [0.0, 0.0, 0.0]


def test_loading_onto_a_missing_device_is_a_clear_error(checkpoint):
    with pytest.raises(RuntimeError, match="neuron"):
        torch.load(saved(checkpoint), map_location="neuron:7")


def test_pickling_a_tensor_round_trips():
    tensor = torch.arange(3.0, device="neuron")
    assert torch.equal(pickle.loads(pickle.dumps(tensor)).cpu(), tensor.cpu())
