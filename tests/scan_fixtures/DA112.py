import torch

torch.backends.cuda.matmul.allow_tf32 = True  # expect: DA112
torch.backends.cudnn.allow_tf32 = True  # expect: DA112

# Not flagged: the generic switch.
torch.set_float32_matmul_precision("high")
torch.backends.cuda.matmul.allow_tf32 = False  # expect: DA112
use_tf32 = torch.backends.cuda.matmul.allow_tf32  # expect: DA112
