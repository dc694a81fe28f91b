import torch

torch.set_default_tensor_type(torch.cuda.BFloat16Tensor)  # expect: DA114
ok = isinstance(x, torch.cuda.FloatTensor)  # expect: DA114
ids = torch.cuda.LongTensor([1, 2])  # expect: DA114

# Not flagged: the CPU types, and a dtype on a device.
torch.set_default_tensor_type(torch.FloatTensor)
y = torch.empty(2, dtype=torch.bfloat16, device=torch.accelerator.current_accelerator())
