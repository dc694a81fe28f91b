import torch
import torch.distributed as dist

dist.init_process_group("nccl")  # expect: DA110
dist.init_process_group(backend="nccl", world_size=1)  # expect: DA110
backend = "nccl" if torch.cuda.is_available() else "gloo"  # expect: DA110 DA101
dist_backend: str = "nccl"  # expect: DA110

# Not flagged: a comparison asks about NCCL itself.
if dist.get_backend() == "nccl":
    pass

# Not flagged.
dist.init_process_group("gloo")
if node.value == "nccl":
    pass

# The switch on NCCL's presence, whole.
dist.init_process_group(backend="nccl" if dist.is_nccl_available() else "gloo")  # expect: DA110
chosen = "nccl" if dist.is_nccl_available() else "gloo"  # expect: DA110
