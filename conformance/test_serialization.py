"""torch.save / torch.load: round trips keep values, dtype, device and shared storage; every
map_location form; weights_only=True; a module's state_dict."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from .assertions import assert_on_device
from .requirements import require, require_devices
from .strategies import TensorSpec, tensor_specs


def saved(obj: object) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def assert_same_tensor(loaded: torch.Tensor, original: torch.Tensor, what: str) -> None:
    """Same device (with index), dtype, shape, strides and values (bitwise, NaNs included)."""
    assert loaded.device == original.device, f"{what} loaded onto {loaded.device}"
    assert loaded.dtype == original.dtype, f"{what} loaded as {loaded.dtype}"
    assert loaded.shape == original.shape and loaded.stride() == original.stride(), (
        f"{what} loaded with shape {tuple(loaded.shape)} strides {loaded.stride()}, saved with "
        f"{tuple(original.shape)} {original.stride()}"
    )
    got, want = loaded.cpu(), original.cpu()
    if want.dtype.is_floating_point or want.dtype.is_complex:
        # Compare the bytes: bitwise, and NaN-safe.
        got, want = (t.reshape(-1).contiguous().view(torch.uint8) for t in (got, want))
    assert torch.equal(got, want), f"{what} changed its values in the round trip"


@given(data=st.data())
def test_round_trip_keeps_values_dtype_and_device(backend, device, data):
    require(backend, "serialization")
    spec: TensorSpec = data.draw(tensor_specs(backend.capabilities.dtypes))
    original = spec.make().to(device)
    loaded = torch.load(saved(original))
    assert_same_tensor(loaded, original, what=f"{spec.code}.to('{device}')")


def test_round_trip_keeps_the_device_index(backend):
    require(backend, "serialization")
    require_devices(backend)
    last = backend.device(backend.device_count - 1)
    checkpoint = {"first": torch.arange(4.0, device=backend.device(0)), "last": torch.ones(3)}
    checkpoint["last"] = checkpoint["last"].to(last)
    loaded = torch.load(saved(checkpoint))
    for key, tensor in checkpoint.items():
        assert_same_tensor(loaded[key], tensor, what=key)


def test_views_keep_sharing_their_storage(backend, device):
    require(backend, "serialization")
    base = torch.arange(24.0, device=device).reshape(4, 6)
    views = {"base": base, "row": base[1], "column": base[:, 2], "transposed": base.t()}
    loaded = torch.load(saved(views))
    for name, view in views.items():
        assert_same_tensor(loaded[name], view, what=name)
        assert loaded[name].storage_offset() == view.storage_offset(), name
        assert loaded[name].untyped_storage().data_ptr() == (
            loaded["base"].untyped_storage().data_ptr()
        ), f"the loaded {name} view no longer shares the base's storage"
    loaded["column"].fill_(-1.0)
    assert loaded["base"][:, 2].cpu().tolist() == [-1.0] * 4
    assert loaded["transposed"][2].cpu().tolist() == [-1.0] * 4


def _checkpoint(device: torch.device) -> dict[str, torch.Tensor]:
    """A tensor on the device and one on the CPU."""
    return {"on_device": torch.arange(6.0, device=device).reshape(2, 3), "on_cpu": torch.ones(3)}


def _indexed(backend) -> str:
    if backend.is_cpu:
        pytest.skip("not applicable: the CPU has no device index")
    return str(backend.device(backend.device_count - 1))


# map_location form: (how to build it from the backend, where each entry must land).
MapLocation = Callable[..., object]
MAP_LOCATIONS: dict[str, tuple[MapLocation, dict[str, str]]] = {
    "none": (lambda backend: None, {"on_device": "device", "on_cpu": "cpu"}),
    "str-cpu": (lambda backend: "cpu", {"on_device": "cpu", "on_cpu": "cpu"}),
    "str-indexed": (_indexed, {"on_device": "indexed", "on_cpu": "indexed"}),
    "torch-device": (
        lambda backend: backend.device(0),
        {"on_device": "device", "on_cpu": "device"},
    ),
    # A dict renames locations: here it swaps the device and the CPU.
    "dict": (
        lambda backend: {str(backend.device(0)): "cpu", "cpu": str(backend.device(0))},
        {"on_device": "cpu", "on_cpu": "device"},
    ),
    # A callable gets each storage on the CPU with its saved location; returning it keeps it there.
    "callable-keep-on-cpu": (
        lambda backend: lambda storage, location: storage,
        {"on_device": "cpu", "on_cpu": "cpu"},
    ),
    "callable-to-device": (
        lambda backend: lambda storage, location: storage.to(device=backend.device(0)),
        {"on_device": "device", "on_cpu": "device"},
    ),
}


@pytest.mark.parametrize("form", list(MAP_LOCATIONS))
@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "full_pickle"])
def test_map_location_forms(backend, device, form, weights_only):
    build, expected = MAP_LOCATIONS[form]
    if form not in ("str-cpu", "callable-keep-on-cpu"):
        require(backend, "serialization")
    map_location = build(backend)
    places = {"device": device, "cpu": torch.device("cpu")}
    if form == "str-indexed":
        places["indexed"] = torch.device(map_location)
    checkpoint = _checkpoint(device)
    loaded = torch.load(saved(checkpoint), map_location=map_location, weights_only=weights_only)
    for key, place in expected.items():
        want = places[place]
        assert loaded[key].device == want, (
            f"torch.load(map_location={map_location!r}) put {key!r} on {loaded[key].device}, "
            f"expected {want}"
        )
        assert torch.equal(loaded[key].cpu(), checkpoint[key].cpu()), key


def test_weights_only_loads_nested_containers(backend, device):
    require(backend, "serialization")
    checkpoint = {
        "step": 7,
        "names": ["a", "b"],
        "tensors": (torch.ones(2, device=device), [torch.arange(3, device=device)]),
        "half": torch.zeros(2, dtype=torch.float16, device=device),
    }
    loaded = torch.load(saved(checkpoint), weights_only=True)
    assert loaded["step"] == 7 and loaded["names"] == ["a", "b"]
    assert_same_tensor(loaded["tensors"][0], checkpoint["tensors"][0], what="tuple entry")
    assert_same_tensor(loaded["tensors"][1][0], checkpoint["tensors"][1][0], what="nested list")
    assert_same_tensor(loaded["half"], checkpoint["half"], what="float16 tensor")


def test_module_state_dict_round_trip(backend, device):
    require(backend, "serialization")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).to(device)
    model(torch.randn(5, 3, device=device))  # updates the BatchNorm running statistics
    state = model.state_dict()
    loaded = torch.load(saved(state), weights_only=True)
    assert list(loaded) == list(state)
    for key, tensor in state.items():
        assert_same_tensor(loaded[key], tensor, what=f"state_dict[{key!r}]")
    restored = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).to(device)
    restored.load_state_dict(torch.load(saved(state), map_location="cpu", weights_only=True))
    for key, tensor in restored.state_dict().items():
        assert_on_device(tensor, device, what=f"restored {key}")
        assert torch.equal(tensor.cpu(), state[key].cpu()), key


def test_loading_onto_a_missing_device_is_a_clear_error(backend, device):
    require(backend, "serialization")
    if backend.is_cpu:
        pytest.skip("not applicable: the CPU has no device index")
    missing = f"{device.type}:{backend.device_count}"
    with pytest.raises(RuntimeError, match=f"(?i){device.type}"):
        torch.load(saved(torch.ones(2, device=device)), map_location=missing)
