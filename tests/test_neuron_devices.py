"""Item 2: device enumeration, the current device, the device guard and bad indices."""

from __future__ import annotations

import threading

import pytest
import torch


@pytest.mark.parametrize(
    ("visible_cores", "expected"),
    [(None, 2), ("0-3", 4), ("0,2,5", 3), ("1", 1), ("0-1,4", 3), (" 2 , 3 ", 2)],
)
def test_device_count_follows_neuron_rt_visible_cores(run_python, visible_cores, expected):
    result = run_python(
        "import torch; print(torch.neuron.device_count(), torch.accelerator.device_count())",
        env={"NEURON_RT_VISIBLE_CORES": visible_cores},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(expected), str(expected)]


@pytest.mark.parametrize(
    "visible_cores",
    [
        *("", "a", "3-1", "0,,1", "-1", "0-"),
        # empty entries, at either end too
        *("1,", ",1", "1,,2", " ", "0, ", "0-1,"),
        # a core named twice: it would be one device, not two
        *("0,0", "0-2,1", "1,0-1", "0-1,1-2", " 1 ,1"),
    ],
)
def test_malformed_visible_cores_is_a_clear_error_naming_the_variable(run_python, visible_cores):
    result = run_python(
        """
        import torch
        try:
            torch.neuron.device_count()
        except RuntimeError as error:
            print("ERROR:", error)
        print("available:", torch.neuron.is_available())
        """,
        env={"NEURON_RT_VISIBLE_CORES": visible_cores},
    )
    assert result.returncode == 0, result.stderr
    assert f"ERROR: Invalid NEURON_RT_VISIBLE_CORES='{visible_cores}': " in result.stdout
    assert 'Use a core index ("1"), a list ("0,2,5") or a range ("0-3")' in result.stdout
    assert "available: False" in result.stdout


@pytest.mark.parametrize(
    ("visible_cores", "reason"),
    [
        ("1,", "it has an empty entry"),
        ("0-2,1", "core 1 is named twice"),
        ("0,0", "core 0 is named twice"),
    ],
)
def test_visible_cores_error_says_what_is_wrong(run_python, visible_cores, reason):
    result = run_python(
        """
        import torch
        try:
            torch.neuron.device_count()
        except RuntimeError as error:
            print("ERROR:", error)
        """,
        env={"NEURON_RT_VISIBLE_CORES": visible_cores},
    )
    assert result.returncode == 0, result.stderr
    assert f"Invalid NEURON_RT_VISIBLE_CORES='{visible_cores}': {reason}." in result.stdout


def test_set_device_index_changes_where_tensors_are_created(restore_device):
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1
    assert torch.neuron.current_device() == 1
    assert torch.empty(2, device="neuron").device == torch.device("neuron:1")
    torch.neuron.set_device("neuron:0")
    assert torch.empty(2, device="neuron").device == torch.device("neuron:0")


def test_device_index_context_restores_on_exception(restore_device):
    torch.accelerator.set_device_index(0)
    with pytest.raises(KeyError):
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_device_index() == 1
            raise KeyError("boom")
    assert torch.accelerator.current_device_index() == 0


def test_neuron_device_context_nests_and_restores(restore_device):
    torch.accelerator.set_device_index(0)
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        with torch.neuron.device(0):
            assert torch.neuron.current_device() == 0
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0


def test_operations_run_under_a_guard_of_their_inputs_device(restore_device):
    torch.accelerator.set_device_index(0)
    x = torch.ones(3, device="neuron:1")
    assert (x + 1).device == torch.device("neuron:1")
    assert x.clone().device == torch.device("neuron:1")
    assert torch.zeros_like(x).device == torch.device("neuron:1")
    assert torch.accelerator.current_device_index() == 0


def test_current_device_is_per_thread(restore_device):
    torch.accelerator.set_device_index(1)
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(torch.accelerator.current_device_index()))
    thread.start()
    thread.join()
    assert seen == [0]
    assert torch.accelerator.current_device_index() == 1


@pytest.mark.parametrize(
    "action",
    [
        lambda: torch.accelerator.set_device_index(2),
        lambda: torch.neuron.set_device(7),
        lambda: torch.empty(1, device="neuron:2"),
        lambda: torch.ones(1).to("neuron:5"),
        lambda: torch.neuron.get_device_properties(3),
        lambda: torch.neuron.device(4).__enter__(),
        lambda: torch.accelerator.synchronize(6),
    ],
    ids=[
        "set_device_index",
        "neuron.set_device",
        "empty",
        "to",
        "get_device_properties",
        "device_context",
        "synchronize",
    ],
)
def test_out_of_range_index_is_an_accelerator_error_as_on_cuda(action, restore_device):
    # CUDA raises torch.AcceleratorError (XPU and OpenReg a RuntimeError): code written
    # `except RuntimeError` for them must catch neuron's too, with the message naming the fix.
    with pytest.raises(RuntimeError, match=r"Invalid neuron device index \d+: this process has 2"):
        action()
    try:
        action()
    except torch.AcceleratorError as error:
        assert not isinstance(error, IndexError)
        assert error.error_code == 101  # cudaErrorInvalidDevice, as CUDA reports it
        assert "NEURON_RT_VISIBLE_CORES" in str(error)
    # the process keeps working
    assert torch.ones(1, device="neuron").item() == 1.0


def test_invalid_device_string_is_a_clear_error():
    with pytest.raises(RuntimeError, match="Invalid device string"):
        torch.device("neuron:x")


def test_neuron_device_context_rejects_another_device_type():
    with pytest.raises(ValueError, match="Expected a neuron device, but got cpu"):
        torch.neuron.device("cpu")
