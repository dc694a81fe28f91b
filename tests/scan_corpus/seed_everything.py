"""The seeding helper copied from project to project: Python, NumPy and torch seeds, every GPU's
generator, cuDNN determinism, and a save/restore of the GPU generators around an evaluation."""

import json
import os
import random

import numpy as np
import torch
from torch import nn


def seed_everything(seed: int, deterministic: bool = True) -> None:
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)  # expect: DA101
    torch.cuda.manual_seed_all(seed)  # expect: DA101
    if deterministic:
        torch.backends.cudnn.deterministic = True  # expect: DA109
        torch.backends.cudnn.benchmark = False


class forked_cuda_rng:
    """Run a block without disturbing the GPU generators (as evaluation with dropout does)."""

    def __enter__(self):
        self.states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None  # expect: DA101
        return self

    def __exit__(self, *exc):
        if self.states is not None:
            torch.cuda.set_rng_state_all(self.states)  # expect: DA101
        return False


def main():
    seed_everything(31)
    draws = {
        "python": round(random.random(), 8),
        "numpy": round(float(np.random.rand()), 8),
        "torch": round(torch.rand(1).item(), 8),
    }

    model = nn.Sequential(nn.Linear(5, 20), nn.Dropout(0.25), nn.ReLU(), nn.Linear(20, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    x = torch.from_numpy(np.random.randn(30, 5).astype("float32"))
    y = x[:, :1] * 2 - x[:, 1:2]
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 6))
    with forked_cuda_rng():
        model.eval()
        eval_loss = nn.functional.mse_loss(model(x), y).item()

    print(
        json.dumps(
            {
                "draws": draws,
                "losses": losses,
                "eval_loss": round(eval_loss, 6),
                "hash_seed": os.environ["PYTHONHASHSEED"],
                "checksum": round(sum(p.detach().abs().sum().item() for p in model.parameters()), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
