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
h = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # expect: DA103
i = a.to(device="cuda:0" if flag else ("cpu" if other else "cuda:1"))  # expect: DA103 DA103

# A variable or function that holds the device (rewritten as a str, so string uses still work).
device = "cuda" if torch.cuda.is_available() else "cpu"  # expect: DA103
self.train_device = "cuda:1"  # expect: DA103
label: str = "cuda"


def get_device():
    if torch.cuda.is_available():  # expect: DA101
        return "cuda:0"  # expect: DA103
    return "cpu"


def name_of_backend():
    return "cuda"  # not a device function: left alone


# The device switches of real projects: argparse defaults, f-strings and .format, map_location,
# autocast's device_type.
parser.add_argument("--device", default="cuda")  # expect: DA103
parser.add_argument("--lr", default="cuda")
x = a.to(f"cuda:{rank}")  # expect: DA103
y = torch.load(path, map_location="cuda:{}".format(rank))  # expect: DA103
z = torch.load(path, map_location="cuda")  # expect: DA103
with torch.autocast(device_type="cuda"):  # expect: DA103
    pass
with torch.autocast("cuda", dtype=torch.float16):  # expect: DA103
    pass


# A "cuda" string in a variable of any name that the function then uses as a device (yolov5's
# select_device), the switch wherever it stands, and device_map="cuda".
def select_device():
    if torch.cuda.is_available():  # expect: DA101
        arg = "cuda:0"  # expect: DA103
    else:
        arg = "cpu"
    return torch.device(arg)


def not_a_device():
    label = "cuda:0"  # printed, never a device: left alone
    print(label)


run(model, "cuda" if torch.cuda.is_available() else "cpu")  # expect: DA103
llm = AutoModelForCausalLM.from_pretrained(path, device_map="cuda")  # expect: DA103
fabric = Fabric(devices=2, accelerator="cuda")  # expect: DA103
trainer = Trainer(accelerator="gpu")
