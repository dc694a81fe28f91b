"""Which patches of the device-agnostic series the running torch carries.

``scripts/patches apply`` (on an installed torch) and ``scripts/patches shadow`` record the
applied series in ``.device_agnostic_patches/state.json`` next to the ``torch`` package. A
known failure that names the patch fixing it (``fixed_by``) is expected to pass on such a torch,
so one manifest serves stock and patched runs, and the report can show them side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

STATE_FILE = Path(".device_agnostic_patches") / "state.json"


def applied_patches(site: Path | None = None) -> tuple[str, ...]:
    """The file names of the series patches applied to the imported torch (or to the torch in
    the folder ``site``); () on stock torch.

    A record that is unreadable or not complete (an interrupted apply) counts as stock: the
    run then expects every known failure, and a fixed one shows up as an unexpected pass.
    """
    if site is None:
        # Not resolved: a torch reached through a symlinked folder belongs to that folder.
        site = Path(torch.__file__).parent.parent
    state_file = site / STATE_FILE
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ()
    if not isinstance(state, dict) or state.get("state") != "applied":
        return ()
    return tuple(entry["name"] for entry in state.get("series", []) if "name" in entry)
