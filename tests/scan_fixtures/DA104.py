import torch

def make_buffer(n, device="cuda"):  # expect: DA104
    return n, device


async def load(path, *, device="cuda:0"):  # expect: DA104
    return path, device


run = lambda x, device="cuda": x  # noqa: E731  # expect: DA104


def fine(n, device=None, dtype="float32"):
    return n, device, dtype


def load_model(name, device="cuda" if torch.cuda.is_available() else "cpu", jit=False):  # expect: DA104
    return name, device, jit
