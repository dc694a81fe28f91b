"""The oldest torch a project supports (``--torch-version``, ``torch-version`` in the config):
a rewrite that calls an API newer than that is not offered (the finding stays, report-only).

The first release of each API the rewrites use, from PyTorch's release notes (checked against
the 2.13 sources for their names; the versions themselves are the notes'):
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from .rules import Finding

# (text in a replacement, the first torch release that has it); the first match in this order
# wins, so the more specific names come first.
FIRST_RELEASE: tuple[tuple[str, tuple[int, int]], ...] = (
    ("check_available=", (2, 7)),
    ("torch.accelerator.device_index", (2, 8)),
    ("torch.accelerator.empty_cache", (2, 8)),
    ("memory_allocated", (2, 8)),
    ("memory_reserved", (2, 8)),
    ("memory_stats", (2, 8)),
    ("torch.accelerator", (2, 6)),
    ("torch.distributed.get_default_backend_for_device", (2, 6)),
    ("torch.OutOfMemoryError", (2, 5)),
    ("torch.amp.custom_fwd", (2, 4)),
    ("torch.amp.custom_bwd", (2, 4)),
    ("torch.amp.GradScaler", (2, 3)),
    ("torch.get_device_module", (2, 3)),
    ("torch.Stream", (2, 3)),
    ("torch.Event", (2, 3)),
    ("torch._C._get_privateuse1_backend_name", (2, 1)),
)


def parse_version(text: str) -> tuple[int, int]:
    """``"2.4"`` or ``"2.4.1"`` -> (2, 4); ValueError on anything else."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*", str(text))
    if not match:
        raise ValueError(f"torch-version {text!r}: expected MAJOR.MINOR, e.g. 2.4")
    return int(match.group(1)), int(match.group(2))


def needs(replacement: str) -> tuple[int, int] | None:
    """The oldest torch that has every API ``replacement`` calls (None: any)."""
    oldest = None
    for text, release in FIRST_RELEASE:
        if text in replacement:
            oldest = max(oldest or release, release)
    return oldest


def limit(findings: Iterable[Finding], version: tuple[int, int] | None) -> list[Finding]:
    """``findings`` with every rewrite newer than ``version`` made report-only."""
    findings = list(findings)
    if version is None:
        return findings
    out = []
    for finding in findings:
        release = needs(finding.replacement) if finding.replacement else None
        if release is not None and release > version:
            finding = dataclasses.replace(
                finding,
                replacement="",
                message=f"{finding.message} (no rewrite: it needs torch >= "
                f"{release[0]}.{release[1]}; the project supports {version[0]}.{version[1]})",
            )
        out.append(finding)
    return out
