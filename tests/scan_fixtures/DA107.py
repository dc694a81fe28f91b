import torch

x = torch.zeros(2)
if x.device.type == "cuda":  # expect: DA107
    pass
if "cuda" != x.device.type:  # expect: DA107
    pass
if x.device.type in ("cuda", "cpu"):  # expect: DA107
    pass

# Not flagged: other comparisons.
if x.device.type == "cpu":
    pass
if x.device.type in ("cpu", "meta"):
    pass
if func.attr != "cuda":
    pass

# Substring and prefix tests of a device string.
if "cuda" in device:  # expect: DA107
    pass
if cfg.device.startswith("cuda"):  # expect: DA107
    pass
if name.startswith("cuda"):
    pass
