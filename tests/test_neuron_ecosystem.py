"""Hugging Face accelerate and transformers' Trainer on neuron, the way docs/neuron-ecosystem.md
documents it.

accelerate (1.15) and Trainer (transformers 5.23) pick their device from a list of device types
they know, never from ``torch.accelerator``; "neuron" is on the list only when AWS's
``torch_neuronx`` is installed. Without it they train on the CPU without a word. Setting
``ACCELERATE_TORCH_DEVICE=neuron`` (accelerate's own variable) makes both train on neuron, and
``ACCELERATE_MIXED_PRECISION=bf16`` gives bfloat16 autocast on neuron (``bf16=True`` in
``TrainingArguments`` is refused: "Your setup doesn't support bf16/gpu").

transformers and accelerate are pinned in requirements.txt. Outside a bootstrapped venv they may
be missing, and the tests skip; under scripts/test (``DEVICE_AGNOSTIC_BOOTSTRAPPED``) a missing one
is a failure, so that CI cannot pass without running them.
"""

from __future__ import annotations

import os

import pytest
import torch

from device_agnostic.neuron import _C


def import_or_skip(name: str) -> object:
    if os.environ.get("DEVICE_AGNOSTIC_BOOTSTRAPPED"):
        return __import__(name)  # scripts/bootstrap installed it: missing is a bootstrap bug
    return pytest.importorskip(name, reason=f"needs {name} (pinned in requirements.txt)")


transformers = import_or_skip("transformers")
accelerate = import_or_skip("accelerate")

from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_accelerate_state(monkeypatch: pytest.MonkeyPatch) -> object:
    """accelerate keeps its device in process-wide shared state: start and end each test clean,
    with none of the variables a developer's shell may set."""
    for name in ("ACCELERATE_TORCH_DEVICE", "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    return LlamaForCausalLM(config)


def token_batches() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        {
            "input_ids": torch.randint(0, 64, (16,), generator=generator),
            "labels": torch.randint(0, 64, (16,), generator=generator),
        }
        for _ in range(8)
    ]


def train_with_trainer(tmp_path, **arguments) -> tuple[Trainer, dict[str, int]]:
    """Three Trainer steps of the tiny Llama; returns the trainer and the neuron kernel calls
    made on this thread during training (the backward runs on the calling thread)."""
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_pin_memory=False,
        seed=0,
        **arguments,
    )
    trainer = Trainer(model=tiny_llama(), args=args, train_dataset=token_batches())
    direct, boxed = _C._direct_kernel_calls(), _C._boxed_fallback_calls()
    trainer.train()
    calls = {
        "direct": _C._direct_kernel_calls() - direct,
        "boxed": _C._boxed_fallback_calls() - boxed,
    }
    return trainer, calls


def test_without_the_setting_accelerate_and_trainer_train_on_the_cpu(tmp_path) -> None:
    """The trap the documented setting avoids. If this fails, accelerate has learnt to use
    torch.accelerator: docs/neuron-ecosystem.md should then say so."""
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert Accelerator().device.type == "cpu"
    AcceleratorState._reset_state(reset_partial_state=True)
    with pytest.raises(ValueError, match="doesn't support bf16/gpu"):
        TrainingArguments(output_dir=str(tmp_path), bf16=True, report_to=[])
    AcceleratorState._reset_state(reset_partial_state=True)
    trainer, calls = train_with_trainer(tmp_path)
    assert trainer.args.device.type == "cpu"
    assert next(trainer.model.parameters()).device.type == "cpu"
    assert calls == {"direct": 0, "boxed": 0}


def test_accelerate_trains_on_neuron_with_accelerate_torch_device(monkeypatch) -> None:
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "neuron")
    accelerator = Accelerator()
    assert accelerator.device == torch.device("neuron")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16,))),
        batch_size=4,
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    direct = _C._direct_kernel_calls()
    for inputs, targets in loader:
        assert inputs.device.type == "neuron" and targets.device.type == "neuron"
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    assert _C._direct_kernel_calls() > direct
    assert all(p.device.type == "neuron" for p in model.parameters())
    assert any(
        not torch.equal(b, p.detach().cpu())
        for b, p in zip(before, model.parameters(), strict=True)
    )


def test_trainer_trains_on_neuron_as_on_the_cpu(tmp_path, monkeypatch) -> None:
    """The documented way: Trainer's model, batches and kernels on neuron, and the trained
    weights those of the same three steps on the CPU."""
    cpu_trainer, _ = train_with_trainer(tmp_path / "cpu", use_cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "neuron")
    trainer, calls = train_with_trainer(tmp_path / "neuron")
    assert trainer.args.device.type == "neuron"
    assert all(p.device.type == "neuron" for p in trainer.model.parameters())
    # Linear, matmul, softmax, their backwards and AdamW's arithmetic are direct kernels.
    assert calls["direct"] > 100, calls
    for (name, cpu_param), neuron_param in zip(
        cpu_trainer.model.named_parameters(), trainer.model.parameters(), strict=True
    ):
        torch.testing.assert_close(
            neuron_param.detach().cpu(), cpu_param.detach(), rtol=1e-4, atol=1e-5, msg=name
        )


def test_trainer_autocasts_bfloat16_on_neuron_with_accelerate_mixed_precision(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "neuron")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    seen: set[tuple[str, torch.dtype]] = set()
    original_init = Trainer.__init__

    def init_and_hook(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        projection = self.model.model.layers[0].mlp.down_proj
        projection.register_forward_hook(lambda m, i, out: seen.add((out.device.type, out.dtype)))

    monkeypatch.setattr(Trainer, "__init__", init_and_hook)
    trainer, calls = train_with_trainer(tmp_path)
    assert trainer.accelerator.mixed_precision == "bf16"
    assert seen == {("neuron", torch.bfloat16)}
    assert calls["direct"] > 100, calls
    # autocast casts the forward's inputs, not the parameters: they stay float32 on neuron
    assert {(p.device.type, p.dtype) for p in trainer.model.parameters()} == {
        ("neuron", torch.float32)
    }
