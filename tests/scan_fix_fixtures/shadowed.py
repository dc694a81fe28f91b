from mylib import torch

torch.cuda.synchronize()
x = y.to("cuda")
