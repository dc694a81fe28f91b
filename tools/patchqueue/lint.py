"""``lint``: PyTorch's whole Python lint on every file the series patches or adds.

A patch that upstream's PYFMT (usort, then ``ruff format``) or RUFF linter rejects is not
merged, so the series is held to the same settings (``pytorch_ruff.toml``: upstream's
``[tool.ruff]``, line length 88; usort with upstream's ``[tool.usort]``, see
:mod:`tools.patchqueue.pyfmt`). The files are checked as they are after the whole series, in a
scratch tree that mirrors their repository paths (so upstream's per-file ignores such as
``test/jit/**`` apply), next to the same files before the series:

- PYFMT: an added file, and a patched file PYFMT accepted before, must be accepted after; in a
  patched file upstream keeps unformatted, each line the series adds or rewrites must be as
  PYFMT writes it (a new over-long or unformatted line counts there too);
- ``ruff check``: a patched file may not gain a diagnostic (counted by code and message, so a
  patch that moves lines is not blamed for what was there); an added file has none.

Each finding says file:line and the fix. Nothing here imports torch; the tools run as
subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput
from tools.patchqueue.pyfmt import RUFF_CONFIG, Finding, _executable, findings, format_texts
from tools.patchqueue.series import Series
from tools.patchqueue.targets import InstalledTorch


@dataclass
class FileLint:
    """One file after the series: what PYFMT and ruff say that they did not say before."""

    path: str
    added: bool  # a new file (a test), not a patched upstream file
    findings: list[Finding] = field(default_factory=list)
    formatted_before: bool | None = None  # None: the file is new

    @property
    def clean(self) -> bool:
        """No finding."""
        return not self.findings

    @property
    def new_diagnostics(self) -> list[str]:
        """The ruff diagnostics the series adds (``CODE message``)."""
        return [f"{f.code} {f.message}" for f in self.findings if f.code not in ("PYFMT", "LONG")]

    @property
    def formatted(self) -> bool:
        """No PYFMT finding on this file."""
        return not any(f.code in ("PYFMT", "LONG") for f in self.findings)

    def describe(self) -> str:
        """``torch/x.py: clean``, or one line per finding (file:line, what, the fix)."""
        if not self.findings:
            return f"{self.path}: clean"
        return "\n".join(f.describe() for f in self.findings)


def ruff_executable() -> str:
    """The ruff next to this interpreter (the pinned one in .venv), else the one on PATH."""
    return _executable("ruff")


def _ruff_json(args: list[str], root: Path) -> list[dict]:
    proc = subprocess.run(
        [ruff_executable(), *args, "--config", str(RUFF_CONFIG), "--no-cache",
         "--output-format", "json"],
        cwd=root, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    try:
        return json.loads(proc.stdout or "[]")
    except ValueError as exc:
        raise BadInput(f"ruff {args[0]} gave no JSON: {proc.stderr.strip()[-500:]}") from exc


def _diagnostics(root: Path, paths: list[str]) -> dict[str, list[dict]]:
    """Per file, ruff check's diagnostics (each with code, message and location)."""
    result: dict[str, list[dict]] = {}
    if not paths:
        return result
    for entry in _ruff_json(["check", "--exit-zero", *paths], root):
        path = Path(entry["filename"]).resolve().relative_to(root.resolve()).as_posix()
        result.setdefault(path, []).append(entry)
    return result


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for path, data in files.items():
        dest = root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(data, encoding="utf-8")


def _key(entry: dict) -> str:
    return f"{entry['code']} {entry['message']}"


def lint_texts(before: dict[str, str | None], after: dict[str, str]) -> dict[str, FileLint]:
    """Lint a change: ``before[path]`` is the file before (None: a new file), ``after[path]``
    the file after. Every PYFMT finding (see :func:`tools.patchqueue.pyfmt.findings`) and every
    ruff diagnostic the change adds, per file, with its line."""
    olds = {p: t for p, t in before.items() if t is not None and p in after}
    with tempfile.TemporaryDirectory(prefix="patches-lint-") as tmp:
        old_root, new_root = Path(tmp, "before"), Path(tmp, "after")
        _write_tree(old_root, olds)
        _write_tree(new_root, after)
        old_diags = _diagnostics(old_root, sorted(olds))
        new_diags = _diagnostics(new_root, sorted(after))
    formatted_before = format_texts(olds)
    pyfmt = findings(before, after, format_texts(after), formatted_before)
    results: dict[str, FileLint] = {}
    for path in sorted(after):
        gained = Counter(map(_key, new_diags.get(path, []))) - Counter(
            map(_key, old_diags.get(path, []))
        )
        found = [f for f in pyfmt if f.path == path]
        # The diagnostics a key gained are the last ones of that key in the file: a patch
        # that adds a second unused import adds the later one far more often than not.
        for entry in reversed(new_diags.get(path, [])):
            key = _key(entry)
            if gained[key] > 0:
                gained[key] -= 1
                fix = (entry.get("fix") or {}).get("message") or "see ruff's rule page"
                found.append(
                    Finding(path, entry["location"]["row"], entry["code"], entry["message"], fix)
                )
        found.sort(key=lambda f: (f.line, f.code))
        results[path] = FileLint(
            path=path,
            added=path not in olds,
            findings=found,
            formatted_before=None if path not in olds else formatted_before[path] == olds[path],
        )
    return results


def lint_series(series: Series, torch: InstalledTorch) -> dict[str, list[FileLint]]:
    """Per patch (by file name), the lint of every ``.py`` file it touches, after the series.

    The installed torch gives the files before the series (it must be the series' base); the
    series is applied in memory. Raises BadInput when a patch does not apply or a tool fails.
    """
    plan = plan_series(series, torch.read, torch.scope)
    if not plan.clean:
        broken = [o.describe() for o in plan.outcomes if o.state != "applies"]
        raise BadInput("the series does not apply to the installed torch:\n" + "\n".join(broken))
    after = {
        p: d.decode("utf-8") for p, d in plan.files.items() if p.endswith(".py") and d is not None
    }
    before = {
        p: plan.original[p].decode("utf-8") if plan.original.get(p) is not None else None
        for p in after
    }
    results = lint_texts(before, after)
    return {
        patch.name: [results[f.path] for f in patch.files if f.path in results]
        for patch in series.patches
    }
