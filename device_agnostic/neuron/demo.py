"""Show the neuron backend at work: its devices, a training run checked against the CPU, memory.

Run ``python -m device_agnostic.neuron.demo`` (``scripts/main`` does). Only public torch APIs are
used: ``import torch`` autoloads the backend, and from then on "neuron" answers through
``torch.accelerator`` and ``torch.get_device_module`` like any other accelerator.
Exits 1 when the weights trained on neuron and on the CPU differ by TOLERANCE or more.
"""

from __future__ import annotations

import copy
import sys

import torch
from torch import nn

SEED = 0
STEPS = 20
LEARNING_RATE = 0.05
TOLERANCE = 1e-5
MIB = 1024 * 1024


def describe_devices() -> torch.device:
    """Print the accelerator, its devices and their properties; return the current device."""
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None or accelerator.type != "neuron":
        raise SystemExit(
            f"demo: the current accelerator is {accelerator}, not neuron. Install the backend "
            "(scripts/bootstrap) and make sure TORCH_DEVICE_BACKEND_AUTOLOAD is not 0."
        )
    module = torch.get_device_module(accelerator.type)
    count = torch.accelerator.device_count()
    print(f"accelerator: {accelerator.type}, {count} device(s)")
    for index in range(count):
        print(f"  {accelerator.type}:{index}  {module.get_device_name(index)}")
        print(f"    {module.get_device_properties(index)}")
    return torch.device(accelerator.type, torch.accelerator.current_device_index())


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic regression data, made on the CPU from a fixed generator."""
    generator = torch.Generator().manual_seed(SEED)
    inputs = torch.randn(256, 8, generator=generator)
    true_weights = torch.randn(8, 1, generator=generator)
    targets = torch.sin(inputs) @ true_weights + 0.1 * torch.randn(256, 1, generator=generator)
    return inputs, targets


def train(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, device: torch.device
) -> list[float]:
    """Train ``model`` in place on ``device`` for STEPS steps of SGD; return the loss per step."""
    model.to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def max_weight_difference(reference: nn.Module, other: nn.Module) -> float:
    """The largest absolute difference between corresponding parameters, compared on the CPU."""
    return max(
        (ref.detach() - oth.detach().cpu()).abs().max().item()
        for ref, oth in zip(reference.parameters(), other.parameters(), strict=True)
    )


def print_memory(device: torch.device) -> None:
    """Print the allocator's statistics and the device's free/total memory."""
    statistics = {
        "allocated": torch.accelerator.memory_allocated(device.index),
        "max allocated": torch.accelerator.max_memory_allocated(device.index),
        "reserved": torch.accelerator.memory_reserved(device.index),
    }
    free, total = torch.accelerator.get_memory_info(device.index)
    print(f"memory on {device}:")
    for label, nbytes in statistics.items():
        print(f"  {label:<14} {nbytes / MIB:12.3f} MiB")
    print(f"  {'free / total':<14} {free / MIB:12.1f} / {total / MIB:.1f} MiB")


def main() -> int:
    """Run the demonstration; return the process exit status."""
    device = describe_devices()

    torch.manual_seed(SEED)
    cpu_model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    device_model = copy.deepcopy(cpu_model)  # identical initial weights
    inputs, targets = make_data()
    cpu_losses = train(cpu_model, inputs, targets, torch.device("cpu"))
    device_losses = train(device_model, inputs, targets, device)

    print(f"\ntraining: MLP 8-32-1, {STEPS} SGD steps (lr {LEARNING_RATE}), MSE loss")
    print(f"  {'step':>4}  {'cpu':>12}  {device.type:>12}")
    for step, (cpu_loss, device_loss) in enumerate(zip(cpu_losses, device_losses, strict=True)):
        print(f"  {step + 1:>4}  {cpu_loss:12.6f}  {device_loss:12.6f}")
    difference = max_weight_difference(cpu_model, device_model)
    verdict = "ok" if difference < TOLERANCE else "FAILED"
    print(f"  max |w_cpu - w_{device.type}|: {difference:.3e} (< {TOLERANCE:g}: {verdict})\n")

    print_memory(device)
    return 0 if difference < TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
