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

# A conditional that picks CUDA when it is there: the "cuda" branch is flagged.
h = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # expect: DA101 DA103
i = a.to(device="cuda:0" if flag else ("cpu" if other else "cuda:1"))  # expect: DA103 DA103

# A variable or function that holds the device (review: callers may use it as a string).
device = "cuda" if torch.cuda.is_available() else "cpu"  # expect: DA101 DA103
self.train_device = "cuda:1"  # expect: DA103
label: str = "cuda"


def get_device():
    if torch.cuda.is_available():  # expect: DA101
        return "cuda:0"  # expect: DA103
    return "cpu"


def name_of_backend():
    return "cuda"  # not a device function: left alone
