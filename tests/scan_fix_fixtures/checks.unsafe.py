import torch
from torch.cuda import amp

x = torch.zeros(2)
scaler = torch.amp.GradScaler(
    torch.accelerator.current_accelerator().type, init_scale=2.0**16,  # keep
)
with torch.amp.autocast(torch.accelerator.current_accelerator().type, dtype=torch.bfloat16):
    pass
autocast_class = amp.autocast  # not rewritten: the replacement is a call


@torch.amp.custom_fwd(device_type=torch.accelerator.current_accelerator().type, cast_inputs=torch.float32)  # review
def forward(ctx, x):
    return x


if x.device.type == torch.accelerator.current_accelerator().type and not x.device.type == torch.accelerator.current_accelerator().type:  # review
    pass
same = (x.device.type == torch.accelerator.current_accelerator().type) == True  # review, parenthesised
if x.device.type in (torch.accelerator.current_accelerator().type, "cpu"):  # review
    pass
if x.device.type == torch._C._get_privateuse1_backend_name():
    pass
if x.device.type in ["cpu", torch._C._get_privateuse1_backend_name()]:
    pass
