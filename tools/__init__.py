"""Maintainers' tools (patch queue, CUDA-assumption scanner); the package never imports them."""
