"""``refresh --onto SOURCE``: carry the series to another PyTorch (a git checkout, or an
installed torch of another version, e.g. the ``torch/`` folder of a 2.14.1 wheel).

Per patch, cumulatively and in order, with the zero-fuzz engine: applies cleanly / applies with
offset (the offsets are reported) / already upstream (its reverse applies) / conflicts (file and
hunk). Only when every patch applies, and only with ``--write``, the patch files are rewritten:
each hunk's line numbers move by its offset (its context and changed lines are exactly those of
the new source, or it would not have applied), the ``index`` lines get the new source's blob
hashes, and the series' base line names the new version and commit. Nothing else changes.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.patchqueue.engine import PatchOutcome, apply_file, plan_series
from tools.patchqueue.errors import BadInput
from tools.patchqueue.series import Base, Series
from tools.patchqueue.targets import GitCheckout, InstalledTorch, open_target

_HUNK_RE = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@")
_INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$")
_BASE_LINE_RE = re.compile(r"^#\s*base:\s*torch\s+\S+\s+[0-9a-f]{7,40}\s*$")

STATES = {
    "applies": "applies cleanly",
    "already applied": "already upstream",
    "conflicts": "conflicts",
}


@dataclass
class RefreshResult:
    """The per-patch report, the new base, and whether the patch files were rewritten."""

    outcomes: list[PatchOutcome]
    base: Base | None
    written: list[Path]

    @property
    def clean(self) -> bool:
        """Every patch applies (cleanly or with offset)."""
        return all(o.state == "applies" for o in self.outcomes)


def state_of(outcome: PatchOutcome) -> str:
    """``applies cleanly``, ``applies with offset``, ``already upstream`` or ``conflicts``."""
    if outcome.state == "applies" and outcome.offsets:
        return "applies with offset"
    return STATES[outcome.state]


def source_base(source: GitCheckout | InstalledTorch) -> Base | None:
    """The version and commit of SOURCE, for the series' base line; None when unknown."""
    if isinstance(source, InstalledTorch):
        version, commit = source.version()
        if not commit or not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            return None
        return Base(version.split("+", 1)[0], commit)
    head = subprocess.run(
        ["git", "-C", str(source.root), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        return None
    version = None
    for name in ("version.txt", "torch/version.py"):
        path = source.root / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
            version = match.group(1) if match else text.strip().splitlines()[0].strip()
            break
    if not version:
        return None
    return Base(version.split("+", 1)[0], head.stdout.strip())


def _blob(data: bytes | None, width: int) -> str:
    if data is None:
        return "0" * width
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()[:width]


Section = tuple[dict[int, int], bytes | None, bytes | None]


def refresh_section(text: str, section: Section) -> str:
    """One ``diff --git`` section with its hunk headers moved by their offsets (hunk number ->
    offset) and its index line set to the blob hashes of the file before and after."""
    offsets, before, after = section
    out: list[str] = []
    header = True
    number = 0
    for line in text.split("\n"):
        index = _INDEX_RE.match(line) if header else None
        hunk = _HUNK_RE.match(line)
        if line.startswith("--- "):
            header = False
        if index:
            old, new, mode = index.groups()
            line = f"index {_blob(before, len(old))}..{_blob(after, len(new))}{mode}"
        elif hunk:
            header = False
            number += 1
            off = offsets.get(number, 0)
            old_start, old_len, new_start, new_len = hunk.groups()
            old_n = int(old_start) + off if int(old_start) else 0
            new_n = int(new_start) + off if int(new_start) else 0
            line = f"@@ -{old_n}{old_len} +{new_n}{new_len} @@" + line[hunk.end() :]
        out.append(line)
    return "\n".join(out)


def refresh_patch_text(text: str, sections: list[Section | None]) -> str:
    """The patch with each file section refreshed; a None section is left exactly as it was."""
    parts = re.split(r"(?m)^(?=diff --git )", text)
    head, rest = parts[0], parts[1:]
    if len(rest) != len(sections):
        raise BadInput(f"expected {len(sections)} diff sections, found {len(rest)}")
    out = [head]
    for part, section in zip(rest, sections, strict=True):
        out.append(part if section is None else refresh_section(part, section))
    return "".join(out)


def refresh(series: Series, source_path: Path, *, write: bool = False) -> RefreshResult:
    """Dry-run the series on SOURCE; with ``write`` and every patch applying, rewrite it."""
    source = open_target(source_path)
    plan = plan_series(series, source.read, source.scope)
    base = source_base(source)
    result = RefreshResult(plan.outcomes, base, [])
    if not (write and result.clean):
        return result
    if base is None:
        raise BadInput(
            f"{source_path}: cannot tell its torch version and git commit (version.py's "
            "git_version, or a checkout's HEAD and version.txt); nothing written"
        )
    # A second cumulative pass, now that everything applies, for the numeric offsets and the
    # bytes before and after each file section.
    state: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        if path not in state:
            state[path] = source.read(path) if source.scope(path) == "target" else None
        return state[path]

    texts: dict[Path, str] = {}
    for patch in series.patches:
        sections: list[Section | None] = []
        for fpatch in patch.files:
            where = source.scope(fpatch.path)
            if where == "skip" or (where == "tests" and fpatch.status != "added"):
                sections.append(None)  # outside this source: left as it was
                continue
            before = current(fpatch.path)
            after, offsets = apply_file(before, fpatch)
            state[fpatch.path] = after
            sections.append((dict(offsets), before, after))
        text = patch.path.read_text(encoding="utf-8")
        texts[patch.path] = refresh_patch_text(text, sections)
    series_file = series.directory / "series"
    lines = series_file.read_text(encoding="utf-8").split("\n")
    lines = [
        f"# base: torch {base.version} {base.commit}" if _BASE_LINE_RE.match(line) else line
        for line in lines
    ]
    texts[series_file] = "\n".join(lines)
    for path, text in texts.items():
        if path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            result.written.append(path)
    return result


def report(series: Series, source: Path, result: RefreshResult, write: bool) -> list[str]:
    """A Markdown table (patch, state, details) and a closing line."""
    onto = f"torch {result.base.version} ({result.base.commit[:12]})" if result.base else source
    lines = [f"| patch | onto {onto} | details |", "|---|---|---|"]
    for outcome in result.outcomes:
        details = [f.describe() for f in outcome.failures] + outcome.offsets
        details += [f"skipped {s}" for s in outcome.skipped]
        cell = "; ".join(details).replace("|", "\\|") or "-"
        lines.append(f"| {outcome.patch.name} | {state_of(outcome)} | {cell} |")
    counts: dict[str, int] = {}
    for outcome in result.outcomes:
        counts[state_of(outcome)] = counts.get(state_of(outcome), 0) + 1
    summary = ", ".join(f"{n} {state}" for state, n in counts.items())
    lines.append("")
    if result.written:
        lines.append(
            f"{len(series.patches)} patches onto {onto}: {summary}; rewrote "
            + ", ".join(p.name for p in result.written)
        )
    elif write and result.clean:
        lines.append(f"{len(series.patches)} patches onto {onto}: {summary}; already up to date")
    elif result.clean:
        lines.append(
            f"{len(series.patches)} patches onto {onto}: {summary}; report only "
            "(pass --write to rewrite the patch files and the series' base)"
        )
    else:
        lines.append(
            f"{len(series.patches)} patches onto {onto}: {summary}; nothing written (the "
            "series is rewritten only when every patch applies)"
        )
    return lines
