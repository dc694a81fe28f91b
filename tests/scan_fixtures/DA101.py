import torch
import torch as t
from torch import cuda
from torch.cuda import synchronize as sync

if torch.cuda.is_available():  # expect: DA101
    n = torch.cuda.device_count()  # expect: DA101
    torch.cuda.set_device(0)  # expect: DA101
    t.cuda.synchronize()  # expect: DA101
    cuda.empty_cache()  # expect: DA101
    sync()  # expect: DA101
    s = torch.cuda.Stream()  # expect: DA101
    e = torch.cuda.Event(enable_timing=True)  # expect: DA101
    free, total = torch.cuda.mem_get_info()  # expect: DA101
    torch.cuda.manual_seed_all(0)  # expect: DA101
    state = torch.cuda.get_rng_state()  # expect: DA101
    name = torch.cuda.get_device_name(0)  # expect: DA101
    stats = torch.cuda.memory_stats()  # expect: DA101
    ok = torch.cuda.is_bf16_supported()  # expect: DA101

# Not flagged: CUDA-only APIs with no generic equivalent, and unrelated modules.
torch.cuda.get_arch_list()
other.cuda.is_available()
torch.accelerator.synchronize()

# A guard is only safe when what it guards is (the guard needs review here; still flagged).
if torch.cuda.is_available():  # expect: DA101
    name = torch.cuda.get_device_name(0)  # expect: DA101
torch.cuda.get_rng_state_all()  # expect: DA101

# CUDA by design: a guard of a CUDA-only library is not flagged.
if torch.cuda.is_available():
    import apex

# An assert that says it is for a CUDA-only library is CUDA by design: not flagged.
assert torch.cuda.is_available(), "CUDA required for APEX optimizers"
# A negated guard: once rewritten, another accelerator would skip the fallback (review).
if device == "cuda" and not torch.cuda.is_available():  # expect: DA101 DA107
    device = "cpu"

# The out-of-memory error is one class on every device.
try:
    pass
except torch.cuda.OutOfMemoryError:  # expect: DA101
    pass
