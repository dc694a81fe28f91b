"""DA101: names kept as written around them, comments kept, review rewrites only when asked."""

import torch
from torch import cuda
from torch.cuda import synchronize as sync

if torch.cuda.is_available():  # keep this comment
    torch.accelerator.set_device_index(
        0,  # the first device
    )
    n = (torch.accelerator.device_count())
    torch.accelerator.empty_cache()
    torch.accelerator.synchronize()
    s = torch.cuda.Stream()  # review: torch.Stream
    free, total = torch.cuda.mem_get_info()  # review
    torch.cuda.manual_seed_all(0)
    torch.cuda.synchronize()  # noqa: DA101
    torch.cuda.empty_cache()  # noqa

# Not rewritten: assigning to the CUDA module's attribute is not a use of it.
torch.cuda.synchronize = lambda: None
