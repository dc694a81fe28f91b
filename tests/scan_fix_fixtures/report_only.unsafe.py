import torch

torch.backends.cudnn.deterministic = True
torch.cuda.nvtx.range_push("forward")
torch.cuda.nvtx.range_pop()
with torch.profiler.record_function("step"):  # review
    pass
