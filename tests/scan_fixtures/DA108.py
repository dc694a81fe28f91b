import torch

x = torch.zeros(2)
if x.device.type == "privateuse1":  # expect: DA108
    pass
if x.device.type in ("cpu", "privateuse1"):  # expect: DA108
    pass

# Not flagged.
name = torch._C._get_privateuse1_backend_name()
