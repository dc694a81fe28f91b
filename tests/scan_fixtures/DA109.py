import torch
import torch.backends.cudnn as cudnn

torch.backends.cudnn.deterministic = True  # expect: DA109
cudnn.benchmark = False  # expect: DA190

# Not flagged.
torch.use_deterministic_algorithms(True)
enabled = torch.backends.cudnn.enabled
