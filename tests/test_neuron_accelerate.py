"""Hugging Face accelerate (and so Trainer) on neuron: the documented way trains on neuron.

accelerate 1.15 knows a device named "neuron" only as AWS's: ``is_neuron_available()`` requires
the ``torch_neuronx`` package, so with this backend ``Accelerator()`` silently picks the CPU (as
it does for any PrivateUse1 device it has no branch for). Its own switch
``ACCELERATE_TORCH_DEVICE=neuron`` makes it use the device. Each case runs in a subprocess:
accelerate's state is a process-wide singleton read from the environment once.

Skipped where accelerate is not installed (it is not one of the project's pinned requirements).
"""

from __future__ import annotations

import pytest

pytest.importorskip("accelerate")

TRAIN = """
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    x = torch.randn(4, 8, device=accelerator.device)
    y = torch.randint(0, 2, (4,), device=accelerator.device)
    for _ in range(3):
        optimizer.zero_grad()
        with accelerator.autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
    print(accelerator.device.type, next(model.parameters()).device.type, x.device.type)
"""


def test_accelerate_without_the_switch_silently_trains_on_the_cpu(run_python):
    # The trap the docs warn about: no error, a CPU run.
    done = run_python(TRAIN, env={"ACCELERATE_TORCH_DEVICE": None})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["cpu", "cpu", "cpu"], done.stdout


def test_accelerate_torch_device_neuron_trains_on_neuron(run_python):
    done = run_python(TRAIN, env={"ACCELERATE_TORCH_DEVICE": "neuron"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["neuron", "neuron", "neuron"], done.stdout


TRAINER = """
    import os, tempfile, torch
    from transformers import Trainer, TrainingArguments

    class Pairs(torch.utils.data.Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            x = torch.randn(8, generator=torch.Generator().manual_seed(i))
            return {"x": x, "labels": torch.tensor(i % 2)}

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 2)

        def forward(self, x, labels=None):
            logits = self.linear(x)
            return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(), max_steps=2, per_device_train_batch_size=4,
        report_to=[], save_strategy="no", logging_strategy="no",
    )
    model = Model()
    Trainer(model=model, args=args, train_dataset=Pairs()).train()
    print(args.device.type, next(model.parameters()).device.type)
"""


def test_transformers_trainer_with_accelerate_torch_device_trains_on_neuron(run_python):
    pytest.importorskip("transformers")
    done = run_python(TRAINER, env={"ACCELERATE_TORCH_DEVICE": "neuron"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["neuron", "neuron"], done.stdout
