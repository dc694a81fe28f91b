import torch

a = torch.zeros(3, device="cuda")  # expect: DA103
b = a.to("cuda:1")  # expect: DA103
c = torch.device("cuda")  # expect: DA103
d = torch.empty(2, device="cuda:0")  # expect: DA103
e = a.to(device="cuda", non_blocking=True)  # expect: DA103

# Not flagged: other devices, strings that merely contain "cuda".
f = torch.zeros(3, device="cpu")
g = a.to("cudagraph")
print("cuda")
