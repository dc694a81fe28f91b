"""Neuron tensors shared between processes (device_agnostic/neuron/sharing.py, NeuronSharing.cpp
and the driver's csrc/driver/ipc.cpp).

The in-process tests check share_memory_()/is_shared() and the pickling through
multiprocessing's ForkingPickler; the scenarios of tests/neuron_sharing_worker.py run real
torch.multiprocessing "spawn" children, each in a fresh interpreter (never inside the pytest
worker), and report JSON facts checked here.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch
from torch import nn

WORKER = Path(__file__).with_name("neuron_sharing_worker.py")
ROOT = Path(__file__).resolve().parents[1]


def run_scenario(name: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(WORKER), name],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_share_memory_moves_a_neuron_storage_into_shared_memory_in_place() -> None:
    tensor = torch.arange(6.0, device="neuron:1")
    view = tensor[2:]
    storage = tensor.untyped_storage()
    assert not tensor.is_shared()
    assert tensor.share_memory_() is tensor
    assert tensor.is_shared() and view.is_shared() and storage.is_shared()
    # The same storage object and device, the same bytes, seen by every view.
    assert tensor.untyped_storage()._cdata == storage._cdata
    assert tensor.device == torch.device("neuron:1")
    assert tensor.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    view.add_(10)
    assert tensor.tolist() == [0.0, 1.0, 12.0, 13.0, 14.0, 15.0]
    # Shared storages are not resizable, as the CPU's.
    with pytest.raises(RuntimeError, match="not resizable"):
        tensor.resize_(100)
    # Sharing again is a no-op: the memory stays where it is.
    pointer = tensor.data_ptr()
    tensor.share_memory_()
    assert tensor.data_ptr() == pointer


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_an_out_argument_in_shared_memory_is_not_silently_reallocated() -> None:
    a = torch.ones(4, device="neuron")
    out = torch.zeros(4, device="neuron").share_memory_()
    torch.add(a, a, out=out)  # same size: written in place, still shared
    assert out.tolist() == [2.0] * 4 and out.is_shared()
    small = torch.zeros(2, device="neuron").share_memory_()
    with pytest.raises(RuntimeError, match="not resizable"):
        torch.add(a, a, out=small)
    assert small.is_shared()


def test_share_memory_waits_for_queued_work_in_the_asynchronous_mode(run_python) -> None:
    done = run_python(
        """
        import pickle
        from multiprocessing.reduction import ForkingPickler
        import torch
        assert torch.neuron._C._async_enabled()
        x = torch.zeros(1 << 20, device="neuron")
        for _ in range(20):  # from the second call on, deferred to the stream's worker
            x.add_(1)
        x.share_memory_()
        received = pickle.loads(ForkingPickler.dumps(x))
        torch.neuron.synchronize()
        print(received.min().item(), received.max().item())
        """,
        env={"NEURON_LAUNCH_BLOCKING": "0"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["20.0", "20.0"]


def test_module_share_memory_shares_every_parameter_and_buffer() -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).to("neuron")
    model.share_memory()
    assert all(p.is_shared() for p in model.parameters())
    assert all(b.is_shared() for b in model.buffers() if b.numel() > 0)
    model(torch.randn(4, 3, device="neuron")).sum().backward()  # still trains in place


def test_empty_tensor_share_memory_is_a_no_op() -> None:
    empty = torch.empty(0, device="neuron")
    empty.share_memory_()
    assert not empty.is_shared()


def test_a_pickled_neuron_tensor_is_a_view_of_the_same_shared_memory() -> None:
    tensor = torch.arange(8.0, device="neuron:1").reshape(2, 4)
    received = pickle.loads(ForkingPickler.dumps(tensor.t()))
    # Putting it on a queue (pickling) moved the sender's storage into shared memory first.
    assert tensor.is_shared()
    assert received.device == torch.device("neuron:1")
    assert received.stride() == (1, 4)
    assert torch.equal(received.cpu(), tensor.t().cpu())
    received[0, 0] = 42
    assert tensor[0, 0].item() == 42


def test_a_neuron_storage_in_shared_memory_outlives_the_sender_storage() -> None:
    tensor = torch.arange(4.0, device="neuron")
    payload = ForkingPickler.dumps(tensor)
    sender_storage = torch.multiprocessing.reductions.StorageWeakRef(tensor.untyped_storage())
    del tensor  # the sender's mapping goes; the in-flight handle keeps the memory
    assert sender_storage.expired()
    received = pickle.loads(payload)
    assert received.is_shared()
    assert received.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_non_leaf_neuron_tensor_that_requires_grad_is_refused_as_torch_refuses_it() -> None:
    leaf = torch.ones(3, device="neuron", requires_grad=True)
    with pytest.raises(RuntimeError, match="Cowardly refusing.*call detach"):
        ForkingPickler.dumps(leaf * 2)
    assert not leaf.is_shared()  # refused before anything moved


def test_cpu_tensors_still_take_torchs_path() -> None:
    tensor = torch.arange(4.0)
    received = pickle.loads(ForkingPickler.dumps(tensor))
    assert tensor.is_shared() and received.device.type == "cpu"
    received.add_(1)
    assert tensor.tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_legacy_neuron_storage_classes_pickle_through_the_neuron_reducer() -> None:
    storage = torch.arange(3.0, device="neuron").storage()
    received = pickle.loads(ForkingPickler.dumps(storage))
    assert received.device.type == "neuron" and received.tolist() == [0.0, 1.0, 2.0]


def test_queue_round_trip_between_processes() -> None:
    facts = run_scenario("queue_round_trip")
    assert facts["exit_codes"] == [0]
    assert facts["shared_before_put"] is False and facts["shared_after_put"] is True
    assert facts["still_on"] == "neuron:1"
    received = facts["received"]
    assert received["device"] == "neuron:1"
    assert received["dtype"] == "torch.float32"
    assert (received["shape"], received["stride"], received["storage_offset"]) == (
        [2, 2],
        [4, 2],
        4,
    )
    assert received["values"] == [[4.0, 6.0], [8.0, 10.0]]
    assert received["is_shared"] and received["aliases_base"]
    assert received["parameter"] == ["Parameter", True, "neuron:1"]
    assert received["empty"] == ["neuron:1", [0]]
    # Writes cross in both directions.
    assert facts["after_child_wrote"] == [
        [0.0, 1.0, 2.0, 3.0],
        [104.0, 5.0, 106.0, 7.0],
        [108.0, 9.0, 110.0, 11.0],
    ]
    assert facts["child_saw"][0] == [-1.0, -1.0, -1.0, -1.0]
    # Sent back, the parent's tensor is its own storage again; one made by the child arrives
    # on the same device and outlives the child.
    assert facts["returned_is_own_storage"] is True
    assert facts["made_in_child"] == ["neuron:1", [0.0, 7.0, 14.0]]
    assert facts["made_in_child_after_exit"] == [0.0, 7.0, 14.0]


def test_hogwild_processes_train_one_shared_model() -> None:
    facts = run_scenario("hogwild_locked")
    assert facts["exit_codes"] == [0, 0]
    assert facts["shared"] == [True, True]
    assert facts["devices"] == ["neuron:1"]
    # The parent sees all 2 x 20 steps, exactly as if taken one after another on the CPU.
    assert facts["max_difference_from_sequential_cpu"] < 1e-6
    assert facts["loss_after"] < facts["loss_before"] / 100


@pytest.mark.slow
def test_hogwild_lock_free() -> None:
    facts = run_scenario("hogwild_lock_free")
    assert facts["exit_codes"] == [0, 0, 0]
    assert facts["loss_after"] < facts["loss_before"] / 100


@pytest.mark.slow
def test_dataloader_spawn_workers_return_neuron_tensors() -> None:
    facts = run_scenario("dataloader_workers")
    assert facts["devices"] == ["neuron:1"]
    assert facts["values"] == [[[2.0 * b, 2.0 * b], [2.0 * b + 1, 2.0 * b + 1]] for b in range(3)]


@pytest.mark.slow
def test_on_patched_torch_neuron_tensors_still_share(run_python, tmp_path) -> None:
    # The series' patch 0026 makes torch's reduce_tensor refuse tensors of every device but the
    # CPU and CUDA; neuron's own reducers must still be the ones that run. The shadow is a
    # patched copy of the installed torch's Python files (tools.patchqueue shadow); ~16 s in all.
    from tools.patchqueue.series import load_series
    from tools.patchqueue.verify import ensure_patched_shadow, installed_torch

    shadow, _ = ensure_patched_shadow(
        load_series(ROOT / "patches"), installed_torch(), tmp_path / "patched-torch"
    )
    done = run_python(
        """
        import pickle
        from multiprocessing.reduction import ForkingPickler
        import torch
        from torch.multiprocessing import reductions
        assert hasattr(reductions, "_check_shareable"), "not the patched torch"
        x = torch.arange(4.0, device="neuron:1")
        received = pickle.loads(ForkingPickler.dumps(x))
        received.add_(1)
        print(received.device, x.tolist())
        """,
        env={"PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "neuron:1 [1.0, 2.0, 3.0, 4.0]"
