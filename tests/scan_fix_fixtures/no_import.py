"""No torch import: the rewrite adds one."""

from __future__ import annotations


def run(model, dist):
    model.cuda()
    dist.init_process_group("nccl")  # review
