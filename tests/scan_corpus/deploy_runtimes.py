"""An inference/deployment helper in the style of detection and LLM toolkits: a device picker
that builds "cuda:0" in a variable, CUDA_VISIBLE_DEVICES set and read, a collective backend
chosen by NCCL's presence, a loader with the device switch as a parameter default, a
`device_map="cuda"` loader, a legacy tensor type for fast loading, and the code that is CUDA by
design next to it: an NVLink check, onnxruntime / TensorRT provider choices, a bitsandbytes
quantized weight moved with `.cuda()`."""

import json
import os

import torch
import torch.distributed as dist
from torch import nn


def select_device(device=""):
    device = str(device).strip().lower().replace("cuda:", "")
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"  # expect: DA115
    if device != "cpu" and torch.cuda.is_available():  # expect: DA101
        arg = "cuda:0"  # expect: DA103
    else:
        arg = "cpu"
    return torch.device(arg)


def visible_devices():
    return os.environ.get("CUDA_VISIBLE_DEVICES", "")  # expect: DA115


def collective_backend():
    return "nccl" if dist.is_nccl_available() else "gloo"  # expect: DA110


def load(name, device="cuda" if torch.cuda.is_available() else "cpu"):  # expect: DA104
    torch.manual_seed(0)
    model = nn.Linear(4, 2).to(device)
    return model, str(torch.device(device).type)


def from_pretrained(name, device_map=None):
    torch.manual_seed(0)
    return nn.Linear(4, 2).to(device_map or "cpu")


def load_for_generation(name):
    if torch.cuda.is_available():  # expect: DA101
        return from_pretrained(name, device_map="cuda")  # expect: DA103
    return from_pretrained(name)


def fast_default_type(on):
    if on and torch.cuda.is_available():  # expect: any
        torch.set_default_tensor_type(torch.cuda.HalfTensor)  # expect: DA114


def check_connectivity():
    if torch.cuda.is_available():  # expect: none
        name = torch.cuda.get_device_properties(0).name.lower()  # expect: none
        if "nvidia" in name:
            return check_nvlink_topology()
    return "none"


def check_nvlink_topology():
    return "nvlink"


def onnx_providers():
    cuda = torch.cuda.is_available()  # expect: none
    return ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]


def tensorrt_engine(path):
    try:
        import tensorrt as trt  # noqa: F401
    except ImportError:
        return None
    device = torch.device("cuda:0")  # expect: none
    return device


def merge_quantized(weight):
    if weight.dtype == torch.uint8:
        try:
            import bitsandbytes as bnb
        except ImportError:
            return weight
        quantized = bnb.nn.Params4bit(weight.float(), requires_grad=False)
        return quantized.cuda(weight.device)  # expect: none
    return weight


def main():
    device = select_device("")
    model, loaded_type = load("tiny")
    x = torch.ones(3, 4)
    out = model(x.to(loaded_type)).sum().item()
    generator = load_for_generation("tiny")
    generated = generator(x.to(next(generator.parameters()).device)).sum()
    fast_default_type(False)
    print(
        json.dumps(
            {
                "device": device.type,
                "loaded": loaded_type,
                "out": round(out, 6),
                "generated": round(generated.item(), 6),
                "backend_known": collective_backend() in ("nccl", "gloo", "xccl"),
                "visible": visible_devices() in ("", "-1"),
                "providers": onnx_providers()[-1],
                "nvlink": check_connectivity(),
                "trt": tensorrt_engine("x.engine") is None,
                "merged": merge_quantized(torch.ones(2)).tolist(),
            }
        )
    )


if __name__ == "__main__":
    main()
