"""A regression trainer driven by a dataclass config whose device is a string defaulting to
"cuda"; the trainer downgrades it to the CPU when CUDA is missing and keys pinned memory and
non-blocking copies off the device string."""

import json
from dataclasses import asdict, dataclass, field

import torch
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class TrainConfig:
    device: str = "cuda"  # expect: DA103
    batch_size: int = 16
    steps_per_epoch: int = 4
    epochs: int = 3
    lr: float = 1e-2
    hidden: list = field(default_factory=lambda: [24, 12])


def resolve_device(cfg: TrainConfig) -> TrainConfig:
    if "cuda" in cfg.device and not torch.cuda.is_available():  # expect: DA107 DA101
        cfg.device = "cpu"
    return cfg


def build_model(cfg):
    layers, width = [], 6
    for hidden in cfg.hidden:
        layers += [torch.nn.Linear(width, hidden), torch.nn.GELU()]
        width = hidden
    layers.append(torch.nn.Linear(width, 1))
    return torch.nn.Sequential(*layers)


def build_loader(cfg):
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(cfg.batch_size * cfg.steps_per_epoch, 6, generator=generator)
    y = (x[:, :2].prod(dim=1) + 0.5 * x[:, 2]).unsqueeze(1)
    pin = cfg.device.startswith("cuda")  # expect: DA107
    return DataLoader(TensorDataset(x, y), batch_size=cfg.batch_size, pin_memory=pin), pin


def train(cfg: TrainConfig):
    torch.manual_seed(3)
    model = build_model(cfg).to(cfg.device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=cfg.lr)
    loader, pinned = build_loader(cfg)
    non_blocking = cfg.device != "cpu"
    losses = []
    for _ in range(cfg.epochs):
        total = 0.0
        for x, y in loader:
            x = x.to(cfg.device, non_blocking=non_blocking)
            y = y.to(cfg.device, non_blocking=non_blocking)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        losses.append(round(total / len(loader), 6))
    return model, losses, pinned


def main():
    cfg = resolve_device(TrainConfig())
    model, losses, pinned = train(cfg)
    params = list(model.parameters())
    print(
        json.dumps(
            {
                "device": cfg.device,
                "config": {k: v for k, v in asdict(cfg).items() if k != "device"},
                "pin_memory": pinned,
                "losses": losses,
                "param_device": params[0].device.type,
                "checksum": round(sum(p.detach().cpu().abs().sum().item() for p in params), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
