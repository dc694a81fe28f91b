import torch

x = torch.zeros(2)
if x.is_cuda:  # expect: DA106
    pass
flags = [t.is_cuda for t in (x,)]  # expect: DA106

# Not flagged.
y = x.is_cpu
