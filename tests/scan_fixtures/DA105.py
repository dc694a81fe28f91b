import torch
from torch.cuda import amp
from torch.cuda.amp import custom_fwd

scaler = torch.cuda.amp.GradScaler()  # expect: DA105
with amp.autocast():  # expect: DA105
    pass


@custom_fwd  # expect: DA105
def forward(ctx, x):
    return x


@torch.cuda.amp.custom_bwd  # expect: DA105
def backward(ctx, g):
    return g


# Not flagged: the generic API.
with torch.amp.autocast("cpu"):
    pass
with torch.amp.autocast("cuda"):  # expect: DA103
    pass
with torch.cuda.amp.autocast(dtype=torch.bfloat16):  # expect: DA105
    pass
