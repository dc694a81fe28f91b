import torch
from torch.profiler import ProfilerActivity, profile

activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]  # expect: DA113
with profile(activities=[torch.profiler.ProfilerActivity.CUDA]):  # expect: DA113
    pass

# Not flagged.
cpu_only = [ProfilerActivity.CPU]
