"""``lint``: every file the series patches or adds, checked with PyTorch's own ruff settings.

A patch that upstream's PYFMT (``ruff format``) or RUFF linter rejects is not merged, so the
series is held to the same settings (``pytorch_ruff.toml``: upstream's ``[tool.ruff]``, line
length 88). The files are checked as they are after the whole series, in a scratch tree that
mirrors their repository paths (so upstream's per-file ignores such as ``test/jit/**`` apply),
next to the same files before the series:

- ``ruff check``: a patched file may not gain a diagnostic (counted by code and message, not by
  line, so a patch that moves lines is not blamed for what was there); an added file has none;
- ``ruff format --check``: an added file, and a patched file that was formatted before, must be
  formatted after. A torch file that upstream itself does not keep formatted is reported, not
  failed.

Nothing here imports torch; ruff runs as a subprocess.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput
from tools.patchqueue.series import Series
from tools.patchqueue.targets import InstalledTorch

RUFF_CONFIG = Path(__file__).with_name("pytorch_ruff.toml")


@dataclass
class FileLint:
    """One file after the series: what ruff says that it did not say before."""

    path: str
    added: bool  # a new file (a test), not a patched upstream file
    new_diagnostics: list[str] = field(default_factory=list)
    formatted: bool = True
    formatted_before: bool | None = None  # None: the file is new

    @property
    def clean(self) -> bool:
        """No new diagnostic, and formatted wherever upstream keeps the file formatted."""
        format_required = self.added or self.formatted_before is True
        return not self.new_diagnostics and (self.formatted or not format_required)

    def describe(self) -> str:
        """``torch/x.py: clean`` or what is wrong with it."""
        problems = list(self.new_diagnostics)
        if not self.formatted:
            if self.added or self.formatted_before:
                problems.append("not ruff-formatted (run ruff format with pytorch_ruff.toml)")
            else:
                problems.append("not ruff-formatted, as upstream's file was not (not counted)")
        return f"{self.path}: " + ("; ".join(problems) if problems else "clean")


def ruff_executable() -> str:
    """The ruff next to this interpreter (the pinned one in .venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    if beside.is_file():
        return str(beside)
    found = shutil.which("ruff")
    if found is None:
        raise BadInput("ruff is not installed: run scripts/bootstrap (requirements.txt pins it)")
    return found


def _ruff(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ruff_executable(), *args, "--config", str(RUFF_CONFIG), "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _ruff_json(args: list[str], root: Path) -> list[dict]:
    proc = _ruff([*args, "--output-format", "json"], root)
    try:
        return json.loads(proc.stdout or "[]")
    except ValueError as exc:
        raise BadInput(f"ruff {args[0]} gave no JSON: {proc.stderr.strip()[-500:]}") from exc


def _by_file(root: Path, entries: list[dict]) -> dict[str, Counter[str]]:
    result: dict[str, Counter[str]] = {}
    for entry in entries:
        path = Path(entry["filename"]).resolve().relative_to(root.resolve()).as_posix()
        result.setdefault(path, Counter())[f"{entry['code']} {entry['message']}"] += 1
    return result


def _diagnostics(root: Path, paths: list[str]) -> dict[str, Counter[str]]:
    if not paths:
        return {}
    return _by_file(root, _ruff_json(["check", "--exit-zero", *paths], root))


def _unformatted(root: Path, paths: list[str]) -> set[str]:
    if not paths:
        return set()
    return set(_by_file(root, _ruff_json(["format", "--check", *paths], root)))


def _write_tree(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        dest = root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def lint_series(series: Series, torch: InstalledTorch) -> dict[str, list[FileLint]]:
    """Per patch (by file name), the lint of every ``.py`` file it touches, after the series.

    The installed torch gives the files before the series (it must be the series' base); the
    series is applied in memory. Raises BadInput when a patch does not apply or ruff fails.
    """
    plan = plan_series(series, torch.read, torch.scope)
    if not plan.clean:
        broken = [o.describe() for o in plan.outcomes if o.state != "applies"]
        raise BadInput("the series does not apply to the installed torch:\n" + "\n".join(broken))
    after = {p: d for p, d in plan.files.items() if p.endswith(".py") and d is not None}
    before = {p: plan.original[p] for p in after if plan.original.get(p) is not None}
    with tempfile.TemporaryDirectory(prefix="patches-lint-") as tmp:
        old_root, new_root = Path(tmp, "before"), Path(tmp, "after")
        _write_tree(old_root, before)  # type: ignore[arg-type]
        _write_tree(new_root, after)
        old_diags = _diagnostics(old_root, sorted(before))
        new_diags = _diagnostics(new_root, sorted(after))
        old_unformatted = _unformatted(old_root, sorted(before))
        new_unformatted = _unformatted(new_root, sorted(after))
    results: dict[str, FileLint] = {}
    for path in sorted(after):
        added = path not in before
        gained = new_diags.get(path, Counter()) - old_diags.get(path, Counter())
        results[path] = FileLint(
            path=path,
            added=added,
            new_diagnostics=sorted(gained.elements()),
            formatted=path not in new_unformatted,
            formatted_before=None if added else path not in old_unformatted,
        )
    return {
        patch.name: [results[f.path] for f in patch.files if f.path in results]
        for patch in series.patches
    }
