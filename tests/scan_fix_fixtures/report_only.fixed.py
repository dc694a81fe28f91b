import torch

torch.backends.cudnn.deterministic = True
torch.cuda.nvtx.range_push("forward")
torch.cuda.nvtx.range_pop()
with torch.cuda.nvtx.range("step"):  # review
    pass
