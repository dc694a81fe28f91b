import torch

torch.cuda.synchronize()  # noqa: DA101
torch.cuda.synchronize()  # noqa
torch.cuda.synchronize()  # NOQA: DA102, DA101
x = torch.zeros(2, device="cuda").cuda()  # noqa: DA102  # expect: DA103
torch.cuda.synchronize()  # noqa: DA102  # expect: DA101
