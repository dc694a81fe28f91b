"""Train, checkpoint (weights, optimizer and every RNG state), resume in a fresh model and
check that the resumed run continues exactly. The checkpoint is loaded onto the local rank's
GPU with an f-string / str.format map_location, as launcher-driven scripts do."""

import json
import os
import random
import sys
import tempfile

import torch
from torch import nn

LOCAL_RANK = int(os.environ.get("LOCAL_RANK", "0"))


def rng_state():
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():  # expect: DA101
        state["cuda"] = torch.cuda.get_rng_state_all()  # expect: DA101
    return state


def set_rng_state(state):
    random.setstate(state["python"])
    # map_location moved every tensor to the device; the CPU generator's state must be a CPU
    # ByteTensor (on CUDA as well), as resume code in real projects does.
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])  # expect: DA101


def steps(model, optimizer, device, count):
    losses = []
    for _ in range(count):
        x = torch.randn(16, 8).to(device)
        noise = random.random()
        optimizer.zero_grad()
        loss = (model(x) - x[:, :1] * noise).pow(2).mean()
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 6))
    return losses


def make(device):
    model = nn.Sequential(nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 1)).to(device)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.95))


def main():
    device = f"cuda:{LOCAL_RANK}" if torch.cuda.is_available() else "cpu"  # expect: DA103
    random.seed(0)
    torch.manual_seed(0)
    model, optimizer = make(device)
    first = steps(model, optimizer, device, 5)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "last.pt")
        torch.save(
            {"model": model.state_dict(), "optim": optimizer.state_dict(), "rng": rng_state()}, path
        )
        reference = steps(model, optimizer, device, 5)

        # Resume: what a restarted job does.
        resumed, resumed_optimizer = make(device)
        map_location = "cuda:{}".format(LOCAL_RANK) if torch.cuda.is_available() else "cpu"  # expect: DA103
        checkpoint = torch.load(path, map_location=map_location, weights_only=False)
        resumed.load_state_dict(checkpoint["model"])
        resumed_optimizer.load_state_dict(checkpoint["optim"])
        set_rng_state(checkpoint["rng"])
        again = steps(resumed, resumed_optimizer, device, 5)
        loaded_on = checkpoint["model"]["0.weight"].device.type

    weights = sum(p.detach().cpu().abs().sum().item() for p in resumed.parameters())
    print(
        json.dumps(
            {
                "device": str(device),
                "loaded_on": loaded_on,
                "first": first,
                "resumed": again,
                "resume_exact": again == reference,
                "checksum": round(weights, 5),
            }
        )
    )
    return 0 if again == reference else 1


if __name__ == "__main__":
    sys.exit(main())
