"""Shared by the mutants that replace a neuron kernel."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

_libraries: list[torch.library.Library] = []


def override_neuron_kernel(op: str, kernel: Callable[..., object]) -> None:
    """Replace the PrivateUse1 kernel of ``aten::<op>`` for the rest of the process."""
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        library.impl(op, kernel, "PrivateUse1")
    _libraries.append(library)  # a Library unregisters its kernels when collected
