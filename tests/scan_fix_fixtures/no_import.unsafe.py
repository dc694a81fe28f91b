"""No torch import: the rewrite adds one."""

from __future__ import annotations
import torch


def run(model, dist):
    model.to(torch.accelerator.current_accelerator())
    dist.init_process_group(torch.distributed.get_default_backend_for_device(getattr(torch.accelerator.current_accelerator(), "type", "cuda")))  # review
