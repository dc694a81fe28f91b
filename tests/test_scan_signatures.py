"""The scanner's table of replacement signatures is the pinned torch's, so it cannot drift; and
a rewrite whose arguments the replacement cannot take is never safe."""

from __future__ import annotations

import inspect

import pytest
import torch

from device_agnostic.scan import scan_source
from device_agnostic.scan.rules.cuda_api import _GENERIC
from device_agnostic.scan.rules.signatures import SIGNATURES


def _resolve(name: str):
    obj = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def test_the_signature_table_is_the_installed_torchs() -> None:
    real = {
        name: tuple(
            (p.name, p.kind.name.lower())
            for p in inspect.signature(_resolve(name)).parameters.values()
        )
        for name in SIGNATURES
    }
    assert real == SIGNATURES


def test_every_torch_accelerator_replacement_has_its_signature_in_the_table() -> None:
    replacements = {target for target, _ in _GENERIC.values() if target.startswith("torch.acc")}
    assert replacements - set(SIGNATURES) == set()


@pytest.mark.parametrize(
    ("call", "safe"),
    [
        ("torch.cuda.synchronize()", True),
        ("torch.cuda.synchronize(0)", True),
        ("torch.cuda.synchronize(device=0)", False),
        ("torch.cuda.current_stream(device=d)", False),
        ("torch.cuda.memory_allocated(device=0)", False),
        ("torch.cuda.memory_allocated(0)", False),  # raises without an accelerator
        ("torch.cuda.set_device(device=1)", False),
        ("torch.cuda.synchronize(**kw)", False),
    ],
)
def test_keyword_arguments_the_replacement_cannot_take_make_the_rewrite_review(
    call: str, safe: bool
) -> None:
    (finding,) = scan_source("x.py", f"import torch\n{call}\n".encode())
    assert (finding.fix_safety == "safe") is safe, finding.message


def test_every_safe_call_rewrite_runs_on_the_cpu_and_on_neuron(tmp_path) -> None:
    """Each DA101 replacement, called as the scanner would leave it, on this machine's
    current accelerator (neuron): it exists and takes the original's positional arguments."""
    for name, (target, _) in _GENERIC.items():
        if not target.startswith("torch.accelerator."):
            continue
        function = _resolve(target)
        params = SIGNATURES[target]
        if name in ("set_device",):
            function(0)
        elif name == "set_stream":
            function(torch.accelerator.current_stream())
        elif params:
            function(0) if params[0][1] == "positional_only" else function()
        else:
            function()
