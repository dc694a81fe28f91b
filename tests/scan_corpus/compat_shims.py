"""A project's compat module and the small training run that uses it: optional CUDA-only
libraries imported when present, shims for torch versions with and without torch.accelerator
and torch.amp.custom_fwd, a bf16 check by compute capability, and a helper whose default device
is built when the module is imported."""

import functools
import json

import torch
from torch import nn

try:  # apex's fused optimizers: CUDA builds only
    from apex.optimizers import FusedAdam

    HAS_APEX = True
except ImportError:
    HAS_APEX = False

try:
    import flash_attn  # the CUDA-only kernels; absence is fine

    HAS_FLASH_ATTN = True
except ImportError:
    HAS_FLASH_ATTN = False

TORCH_VERSION = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])

if hasattr(torch.amp, "custom_fwd"):  # torch >= 2.4
    custom_fwd = functools.partial(torch.amp.custom_fwd, device_type="cuda")  # expect: DA103
    custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="cuda")  # expect: DA103
else:
    custom_fwd = torch.cuda.amp.custom_fwd  # expect: none
    custom_bwd = torch.cuda.amp.custom_bwd  # expect: none


def default_device():
    if hasattr(torch, "accelerator"):  # torch >= 2.6
        if torch.accelerator.is_available():
            return torch.accelerator.current_accelerator()
        return torch.device("cpu")
    if torch.cuda.is_available():  # expect: none
        return torch.device("cuda")  # expect: none
    return torch.device("cpu")


def make_scaler(enabled):
    if TORCH_VERSION >= (2, 3):
        return torch.amp.GradScaler("cuda", enabled=enabled)  # expect: DA103
    return torch.cuda.amp.GradScaler(enabled=enabled)  # expect: none


def autocast_dtype():
    if torch.cuda.is_available():  # expect: DA101
        major, _ = torch.cuda.get_device_capability()  # expect: DA101
        return torch.bfloat16 if major >= 8 else torch.float16
    return torch.bfloat16


def build_optimizer(params, lr):
    if HAS_APEX:
        assert torch.cuda.is_available(), "apex FusedAdam runs on CUDA only"  # expect: none
        return FusedAdam(params, lr=lr), "apex.FusedAdam"
    return torch.optim.Adam(params, lr=lr), "torch.optim.Adam"


def move_batch(batch, device=torch.device("cuda")):  # expect: DA103
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


class ScaledSquare(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * scale

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * ctx.scale * grad, None


def main():
    device = default_device()
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(4, 12), nn.Tanh(), nn.Linear(12, 1)).to(device)
    optimizer, optimizer_name = build_optimizer(model.parameters(), 1e-2)
    scaler = make_scaler(enabled=False)
    generator = torch.Generator().manual_seed(6)
    data = {"x": torch.randn(32, 4, generator=generator), "y": torch.randn(32, 1, generator=generator)}
    losses = []
    for _ in range(8):
        batch = move_batch(data, device=device)
        optimizer.zero_grad()
        loss = ScaledSquare.apply(model(batch["x"]) - batch["y"], 0.5).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(round(loss.item(), 6))
    print(
        json.dumps(
            {
                "device": device.type,
                "optimizer": optimizer_name,
                "has_apex": HAS_APEX,
                "has_flash_attn": HAS_FLASH_ATTN,
                "autocast_dtype": str(autocast_dtype()),
                "losses": losses,
                "checksum": round(sum(p.detach().cpu().abs().sum().item() for p in model.parameters()), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
