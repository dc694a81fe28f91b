"""Item 1 and 12: neuron is a registered accelerator with a complete device module."""

from __future__ import annotations

import pytest
import torch
import torch.nn.utils.rnn as rnn

import device_agnostic.neuron as neuron_module

# The backend-module contract documented in torch.utils.rename_privateuse1_backend.
PRIVATEUSE1_CONTRACT = [
    "get_amp_supported_dtype",
    "_is_in_bad_fork",
    "manual_seed_all",
    "device_count",
    "get_rng_state",
    "set_rng_state",
    "is_available",
    "current_device",
]

# What device-generic code reaches through torch.get_device_module().
CUDA_STYLE_PUBLIC_NAMES = [
    "is_initialized",
    "init",
    "set_device",
    "device",
    "synchronize",
    "current_stream",
    "default_stream",
    "stream",
    "set_stream",
    "Stream",
    "Event",
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "empty_cache",
    "mem_get_info",
    "manual_seed",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state_all",
    "set_rng_state_all",
    "default_generators",
    "is_bf16_supported",
    "get_device_name",
    "get_device_properties",
    "get_device_capability",
]


def test_bare_import_torch_makes_neuron_the_current_accelerator(run_python):
    result = run_python(
        """
        import torch
        print(torch.accelerator.current_accelerator())
        print(torch.accelerator.is_available(), torch._C._get_privateuse1_backend_name())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["neuron", "True", "neuron"]


def test_autoload_disabled_leaves_privateuse1_unregistered(run_python):
    result = run_python(
        """
        import torch
        print(torch.accelerator.current_accelerator(), hasattr(torch, "neuron"))
        import device_agnostic.neuron  # an explicit import registers the backend
        print(torch.accelerator.current_accelerator(), hasattr(torch, "neuron"))
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "False", "neuron", "True"]


def test_device_module_is_reachable_through_torch():
    assert torch.neuron is neuron_module
    assert torch.get_device_module("neuron") is neuron_module
    assert torch.get_device_module(torch.device("neuron:1")) is neuron_module


@pytest.mark.parametrize("name", PRIVATEUSE1_CONTRACT + CUDA_STYLE_PUBLIC_NAMES)
def test_device_module_has_public_name(name):
    assert hasattr(torch.neuron, name), f"torch.neuron lacks {name!r}"


def test_device_module_does_not_imitate_cuda_private_attributes():
    # PyTorch code that reads these is CUDA-specific; the patch series fixes it, not us.
    for private in ["_initialized", "_tls", "_queued_calls", "_lazy_call"]:
        assert not hasattr(torch.neuron, private), private


def test_contract_functions_answer_for_neuron():
    assert torch.neuron.is_available() is True
    assert torch.neuron.device_count() == 2
    assert torch.neuron.current_device() == torch.accelerator.current_device_index()
    assert torch.neuron._is_in_bad_fork() is False
    assert torch.bfloat16 in torch.neuron.get_amp_supported_dtype()
    assert torch.neuron.is_bf16_supported() is True


def test_generated_tensor_methods_move_to_neuron():
    cpu = torch.arange(6.0)
    moved = cpu.neuron()
    assert moved.is_neuron and not cpu.is_neuron
    assert moved.device == torch.device("neuron:0")
    assert cpu.neuron(1).device == torch.device("neuron:1")
    assert torch.equal(moved.cpu(), cpu)


def test_generated_module_method_moves_parameters():
    module = torch.nn.Linear(3, 2).neuron()
    assert all(p.device.type == "neuron" for p in module.parameters())


def test_generated_storage_methods():
    storage = torch.UntypedStorage(8).neuron()
    assert storage.is_neuron
    assert storage.device.type == "neuron"


def test_generated_packed_sequence_methods():
    packed = rnn.pack_padded_sequence(torch.randn(3, 2, 4), torch.tensor([3, 2]))
    moved = packed.neuron()
    assert moved.is_neuron
    assert moved.data.device.type == "neuron"


def test_accelerator_capability_excludes_float64():
    capability = torch.accelerator.get_device_capability("neuron:0")
    dtypes = capability["supported_dtypes"]
    assert torch.float32 in dtypes and torch.bfloat16 in dtypes and torch.float8_e4m3fn in dtypes
    assert torch.float64 not in dtypes
    assert torch.complex128 not in dtypes


def test_device_name_and_properties_describe_a_neuroncore():
    assert "NeuronCore" in torch.neuron.get_device_name()
    properties = torch.neuron.get_device_properties(1)
    assert "NeuronCore" in properties.name
    assert properties.index == 1
    assert properties.total_memory == torch.accelerator.get_memory_info(1)[1]
    assert torch.float64 not in properties.supported_dtypes


def test_device_properties_follow_the_memory_capacity(run_python):
    result = run_python(
        "import torch; print(torch.neuron.get_device_properties(0).total_memory)",
        env={"NEURON_DEVICE_MEMORY": "512MiB"},
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == 512 * 2**20


def test_get_device_properties_rejects_another_device_type():
    with pytest.raises(ValueError, match="Expected a neuron device"):
        torch.neuron.get_device_properties("cpu")
