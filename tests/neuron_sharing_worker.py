"""The scenarios of tests/test_neuron_multiprocessing.py: neuron tensors between processes.

    python tests/neuron_sharing_worker.py SCENARIO

Each scenario starts its children with torch.multiprocessing's "spawn" context (the children
import this file as their main module), exchanges neuron tensors with them and prints one JSON
line of facts, which the test checks. Every wait has a deadline: a child that hangs or dies makes
the scenario raise (exit status 1) instead of blocking.
"""

from __future__ import annotations

import contextlib
import json
import sys

import torch
import torch.multiprocessing as mp
from torch import nn

WAIT_S = 60


def join_all(processes: list[mp.Process]) -> list[int | None]:
    for process in processes:
        process.join(WAIT_S)
    codes = [process.exitcode for process in processes]
    for process in processes:
        if process.is_alive():
            process.kill()
    return codes


# ---- queue round trip -------------------------------------------------------------------------


def echo_child(
    inbox: mp.Queue, outbox: mp.Queue, parent_wrote: mp.Event, parent_done: mp.Event
) -> None:
    view, base, parameter, empty = inbox.get(timeout=WAIT_S)
    outbox.put(
        {
            "device": str(view.device),
            "dtype": str(view.dtype),
            "shape": list(view.shape),
            "stride": list(view.stride()),
            "storage_offset": view.storage_offset(),
            "values": view.tolist(),
            "is_shared": view.is_shared(),
            # The view and its base arrived in one message: they still share one storage.
            "aliases_base": view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(),
            "parameter": [type(parameter).__name__, parameter.requires_grad, str(parameter.device)],
            "empty": [str(empty.device), list(empty.shape)],
        }
    )
    view.add_(100)  # seen by the parent
    outbox.put("child wrote")
    if not parent_wrote.wait(WAIT_S):
        raise TimeoutError("the parent never wrote")
    outbox.put({"after_parent_wrote": base.tolist()})
    # Back to the parent: the parent's own storage, and a tensor made here.
    made_here = torch.arange(3.0, device=view.device) * 7
    outbox.put((base, made_here))
    # A sender stays alive until the receiver has unpickled what it sent: the receiver fetches
    # the handles from the sender (multiprocessing's resource sharer), as for CPU tensors.
    if not parent_done.wait(WAIT_S):
        raise TimeoutError("the parent never took the tensors")


def queue_round_trip() -> dict:
    context = mp.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    parent_wrote, parent_done = context.Event(), context.Event()
    base = torch.arange(12.0, device="neuron:1").reshape(3, 4)
    view = base[1:, ::2]  # non-contiguous, storage offset 4
    parameter = nn.Parameter(torch.ones(2, device="neuron:1"))
    empty = torch.empty(0, device="neuron:1")
    facts: dict = {"shared_before_put": base.is_shared()}
    child = context.Process(target=echo_child, args=(inbox, outbox, parent_wrote, parent_done))
    child.start()
    inbox.put((view, base, parameter, empty))
    facts["received"] = outbox.get(timeout=WAIT_S)
    facts["shared_after_put"] = base.is_shared()
    facts["still_on"] = str(base.device)
    if outbox.get(timeout=WAIT_S) != "child wrote":
        raise AssertionError("the child did not write")
    facts["after_child_wrote"] = base.tolist()
    base[0].fill_(-1)
    parent_wrote.set()
    facts["child_saw"] = outbox.get(timeout=WAIT_S)["after_parent_wrote"]
    returned_base, made_in_child = outbox.get(timeout=WAIT_S)
    parent_done.set()
    facts["returned_is_own_storage"] = (
        returned_base.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    )
    facts["made_in_child"] = [str(made_in_child.device), made_in_child.tolist()]
    facts["exit_codes"] = join_all([child])
    # The child has exited and unmapped its side: the tensor it made lives on in this process.
    facts["made_in_child_after_exit"] = made_in_child.tolist()
    return facts


# ---- Hogwild: several processes training one shared model ------------------------------------


def training_data(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 4, generator=generator)
    targets = inputs @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]]) + 0.25
    return inputs.to(device), targets.to(device)


def train(model: nn.Module, steps: int, lock: mp.Lock | None, optimizer: str) -> None:
    """``steps`` SGD steps on ``model``, in place. optimizer "torch.optim" is torch.optim.SGD,
    whose first step imports torch._dynamo (~3 s of CPU per process, on any device); "manual"
    is the same update written out, for the scenario that must stay fast."""
    inputs, targets = training_data(str(next(model.parameters()).device))
    parameters = list(model.parameters())
    learning_rate = 0.05
    sgd = torch.optim.SGD(parameters, lr=learning_rate) if optimizer == "torch.optim" else None
    for _ in range(steps):
        # Locked, a whole step (read, gradient, update) is one worker's: the steps of the workers
        # then follow one another, as sequential steps do. Lock-free, they interleave.
        with lock if lock is not None else contextlib.nullcontext():
            model.zero_grad()
            nn.functional.mse_loss(model(inputs), targets).backward()
            with torch.no_grad():
                if sgd is not None:
                    sgd.step()
                else:
                    for parameter in parameters:
                        parameter.add_(parameter.grad, alpha=-learning_rate)


def make_model(device: str) -> nn.Module:
    torch.manual_seed(1)
    return nn.Linear(4, 1).to(device)


def hogwild(processes: int, steps: int, locked: bool, optimizer: str) -> dict:
    """``processes`` workers each take ``steps`` SGD steps on one shared model. Locked: each
    step is taken whole under the lock from the parameters the last step left, and all compute
    the same gradient function, so the result equals ``processes * steps`` sequential steps on
    the CPU. Lock-free (Hogwild proper): updates may interleave, so only the loss is checked."""
    context = mp.get_context("spawn")
    model = make_model("neuron:1")
    model.share_memory()
    inputs, targets = training_data("neuron:1")
    facts: dict = {
        "shared": [p.is_shared() for p in model.parameters()],
        "loss_before": nn.functional.mse_loss(model(inputs), targets).item(),
    }
    lock = context.Lock() if locked else None
    workers = [
        context.Process(target=train, args=(model, steps, lock, optimizer))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    facts["exit_codes"] = join_all(workers)
    with torch.no_grad():
        facts["loss_after"] = nn.functional.mse_loss(model(inputs), targets).item()
    reference = make_model("cpu")
    train(reference, processes * steps, lock=None, optimizer=optimizer)
    facts["devices"] = sorted({str(p.device) for p in model.parameters()})
    facts["max_difference_from_sequential_cpu"] = max(
        (p.detach().cpu() - r.detach()).abs().max().item()
        for p, r in zip(model.parameters(), reference.parameters(), strict=True)
    )
    return facts


# ---- DataLoader workers returning neuron tensors --------------------------------------------


class NeuronRows(torch.utils.data.Dataset):
    """Row i is [i, i] on neuron:1, made in the worker process."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((2,), float(index), device="neuron:1")


def dataloader_workers() -> dict:
    loader = torch.utils.data.DataLoader(
        NeuronRows(), batch_size=2, num_workers=2, multiprocessing_context="spawn"
    )
    batches = list(loader)
    return {
        "devices": sorted({str(batch.device) for batch in batches}),
        "values": [batch.tolist() for batch in batches],
    }


SCENARIOS = {
    "queue_round_trip": queue_round_trip,
    # Each spawned child costs an interpreter and an `import torch` (~1.5 s of CPU).
    "hogwild_locked": lambda: hogwild(processes=2, steps=20, locked=True, optimizer="manual"),
    "hogwild_lock_free": lambda: hogwild(
        processes=3, steps=20, locked=False, optimizer="torch.optim"
    ),
    "dataloader_workers": dataloader_workers,
}


if __name__ == "__main__":
    print(json.dumps(SCENARIOS[sys.argv[1]]()))
