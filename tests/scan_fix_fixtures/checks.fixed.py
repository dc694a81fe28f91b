import torch
from torch.cuda import amp

x = torch.zeros(2)
scaler = torch.cuda.amp.GradScaler(
    init_scale=2.0**16,  # keep
)
with amp.autocast(dtype=torch.bfloat16):
    pass
autocast_class = amp.autocast  # not rewritten: the replacement is a call


@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)  # review
def forward(ctx, x):
    return x


if x.is_cuda and not x.is_cuda:  # review
    pass
same = x.is_cuda == True  # review, parenthesised
if x.device.type in ("cuda", "cpu"):  # review
    pass
if x.device.type == torch._C._get_privateuse1_backend_name():
    pass
if x.device.type in ["cpu", torch._C._get_privateuse1_backend_name()]:
    pass
