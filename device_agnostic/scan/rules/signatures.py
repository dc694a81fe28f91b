"""The signatures of the device-generic APIs the rewrites call, as torch 2.13 declares them.

The scanner never imports torch, so the table is written here; ``tests/test_scan_signatures.py``
regenerates it from ``inspect.signature`` of the installed torch and fails when the two differ,
so it cannot drift. A rewrite that would pass an argument by a keyword its replacement does not
accept (``torch.accelerator.synchronize(device=d)``: ``synchronize(device=None, /)``) is not
safe.

Each entry: the parameters in order, as ``(name, kind)`` with kind one of ``positional_only``,
``positional_or_keyword``, ``keyword_only``, ``var_positional``, ``var_keyword``.
"""

from __future__ import annotations

Parameters = tuple[tuple[str, str], ...]

_PO = "positional_only"
_PK = "positional_or_keyword"

SIGNATURES: dict[str, Parameters] = {
    "torch.accelerator.current_accelerator": (("check_available", _PK),),
    "torch.accelerator.current_device_index": (),
    "torch.accelerator.current_stream": (("device", _PO),),
    "torch.accelerator.device_count": (),
    "torch.accelerator.device_index": (("device", _PO),),
    "torch.accelerator.empty_cache": (),
    "torch.accelerator.is_available": (),
    "torch.accelerator.max_memory_allocated": (("device_index", _PO),),
    "torch.accelerator.max_memory_reserved": (("device_index", _PO),),
    "torch.accelerator.memory_allocated": (("device_index", _PO),),
    "torch.accelerator.memory_reserved": (("device_index", _PO),),
    "torch.accelerator.memory_stats": (("device_index", _PO),),
    "torch.accelerator.reset_accumulated_memory_stats": (("device_index", _PO),),
    "torch.accelerator.reset_peak_memory_stats": (("device_index", _PO),),
    "torch.accelerator.set_device_index": (("device", _PO),),
    "torch.accelerator.set_stream": (("stream", _PK),),
    "torch.accelerator.synchronize": (("device", _PO),),
}


def accepts(replacement: str, positional: int, keywords: list[str | None]) -> str:
    """'' when a call of ``replacement`` with ``positional`` positional arguments and these
    keywords (None: ``**kwargs``) is accepted, else why not. Unknown names are accepted (their
    signature is the original's: the same function on CUDA)."""
    params = SIGNATURES.get(replacement)
    if params is None:
        return ""
    if None in keywords:
        return f"`{replacement}` cannot be checked against `**kwargs`"
    names = {name: kind for name, kind in params}
    for keyword in keywords:
        kind = names.get(keyword or "")
        if kind is None:
            return f"`{replacement}` has no parameter `{keyword}`"
        if kind == _PO:
            return f"`{replacement}` takes `{keyword}` by position only"
    if positional > sum(kind in (_PO, _PK) for _, kind in params):
        return f"`{replacement}` takes at most {len(params)} arguments"
    return ""
