import torch
from torch.cuda import nvtx

torch.cuda.nvtx.range_push("forward")  # expect: DA111
torch.cuda.nvtx.range_pop()  # expect: DA111
with nvtx.range("step"):  # expect: DA111
    pass

# Not flagged.
with torch.profiler.record_function("forward"):
    pass
