import torch.distributed as dist

dist.init_process_group("nccl")  # expect: DA110
dist.init_process_group(backend="nccl", world_size=1)  # expect: DA110
if dist.get_backend() == "nccl":  # expect: DA110
    pass

# Not flagged.
dist.init_process_group("gloo")
if node.value == "nccl":
    pass
