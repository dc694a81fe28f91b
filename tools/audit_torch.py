"""Audit PyTorch itself with da-scan: what CUDA assumptions torch has, and what the series fixes.

    .venv/bin/python -m tools.audit_torch                          # Markdown tables on stdout
    .venv/bin/python -m tools.audit_torch --json audit.json --write-doc docs/audit.md
    .venv/bin/python -m tools.audit_torch --torch PATH/TO/torch --series patches

Why this exists: the scanner's value is the list of places a second backend trips over, and the
patch series' value is how much of that list it removes. Both numbers must come from the same
run on the same files, and must be re-derived from whatever ``patches/series`` lists today (the
series grows), so nothing here is hard-coded but the list of modules that are CUDA by design
(``tools/audit_cuda_by_design.toml``, one reason per entry).

What it does:

1. scans the installed torch/ tree (located without importing torch) with the scanner's Python
   API, every rule;
2. sets aside the findings in modules that are CUDA by design, counted per entry;
3. copies the scanned files to a temporary directory, overlays the series there with the patch
   queue's engine (the installed torch is never written), and scans the copy;
4. compares: per rule and per subpackage, stock / patched / fixed; per patch, the findings it
   removed (and added), from scanning each file a patch touches before and after it;
5. checks that every finding that disappeared (or appeared) is in a file the series touches,
   and that the per-patch effects add up to the whole-tree difference. A violation is an error:
   exit status 1.

Findings are matched by (file, rule, message, text of the line), not by line number, so a patch
that inserts lines above a finding does not count as removing it.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import tomllib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from device_agnostic.scan.discover import discover
from device_agnostic.scan.engine import scan_source
from device_agnostic.scan.parallel import scan_files
from device_agnostic.scan.rules import ALL_RULES, Finding
from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput
from tools.patchqueue.series import Series, load_series
from tools.patchqueue.targets import InstalledTorch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EXCLUSIONS = ROOT / "tools" / "audit_cuda_by_design.toml"
DEFAULT_SERIES = ROOT / "patches"
TOP_SUBPACKAGES = 30
TOP_LEVEL = "torch (top-level modules)"
RULE_SUMMARIES = {rule.id: rule.summary for rule in ALL_RULES}
RULE_SUMMARIES.update({"DA901": "file does not parse", "DA902": "file is not valid UTF-8"})

# (path from site-packages, rule, message, stripped text of the flagged line)
Key = tuple[str, str, str, str]


# --------------------------------------------------------------------------- exclusions


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` within one path component, ``**`` across any number, ``?`` one character."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


@dataclass
class ModuleEntry:
    """One entry of the exclusion file: a name, path globs and the one-line reason."""

    name: str
    paths: list[str]
    reason: str
    _regexes: list[re.Pattern[str]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._regexes = [_glob_regex(p) for p in self.paths]

    def matches(self, rel: str) -> bool:
        """Whether ``rel`` (``torch/...``) is one of this entry's modules."""
        return any(regex.match(rel) for regex in self._regexes)


@dataclass
class Exclusions:
    """The modules left out of the audit (``exclude``) and those considered but kept."""

    exclude: list[ModuleEntry]
    kept: list[ModuleEntry]

    def entry_for(self, rel: str) -> ModuleEntry | None:
        """The first exclusion entry that matches ``rel``; None: the file is audited."""
        return next((entry for entry in self.exclude if entry.matches(rel)), None)


def load_exclusions(path: Path) -> Exclusions:
    """Read the TOML list; every entry needs a name, at least one path and a reason."""
    with open(path, "rb") as handle:
        data = tomllib.load(handle)

    def entries(kind: str) -> list[ModuleEntry]:
        result = []
        for number, item in enumerate(data.get(kind, []), 1):
            name, paths, reason = item.get("name"), item.get("paths"), item.get("reason")
            if not name or not paths or not reason or not isinstance(paths, list):
                raise BadInput(f"{path}: [[{kind}]] entry {number} needs name, paths and reason")
            result.append(ModuleEntry(str(name), [str(p) for p in paths], str(reason)))
        return result

    return Exclusions(entries("exclude"), entries("kept"))


# --------------------------------------------------------------------------- scanning


def find_torch() -> Path:
    """The installed torch package directory, found without importing torch (its startup
    costs seconds and is not needed: the scanner only reads files)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput("torch is not installed in this environment; pass --torch PATH")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def rule_ids() -> list[str]:
    """Every rule: the audit reports them all, whatever a pyproject.toml selects."""
    return [rule.id for rule in ALL_RULES]


class _Lines:
    """The text of flagged lines, read once per file, to key findings independent of line
    numbers."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str]] = {}

    def line(self, path: str, number: int, data: bytes | None = None) -> str:
        if path not in self._cache:
            if data is None:
                try:
                    data = Path(path).read_bytes()
                except OSError:
                    data = b""
            self._cache[path] = data.decode("utf-8", "replace").splitlines()
        lines = self._cache[path]
        return lines[number - 1].strip() if 0 < number <= len(lines) else ""


def _key(rel: str, finding: Finding, text: str) -> Key:
    return (rel, finding.rule, finding.message, text)


def scan_tree(torch_dir: Path, jobs: int = 0) -> tuple[list[str], list[Key]]:
    """The files under ``torch_dir`` (relative to its parent) and their findings as keys.

    Uses discover + the process pool of ``da-scan`` itself, so the audit measures exactly what
    the command finds.
    """
    base = torch_dir.parent
    found = discover([str(torch_dir)])
    if found.errors:
        raise BadInput(f"{torch_dir}: unreadable paths: {[f.path for f in found.errors][:5]}")
    findings = scan_files(found.files, rule_ids(), jobs)
    lines = _Lines()
    keys = [_key(_rel(f.path, base), f, lines.line(f.path, f.line)) for f in sorted(findings)]
    return [_rel(path, base) for path in found.files], keys


def _rel(path: str, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def scan_bytes(rel: str, data: bytes | None) -> Counter[Key]:
    """The findings of one file's contents (None: absent), keyed; non-Python files have none."""
    if data is None or not rel.endswith((".py", ".pyi")):
        return Counter()
    lines = _Lines()
    return Counter(
        _key(rel, f, lines.line(rel, f.line, data)) for f in scan_source(rel, data, ALL_RULES)
    )


# --------------------------------------------------------------------------- the series


@dataclass
class PatchEffect:
    """What one patch of the series does to the audit."""

    name: str
    subject: str
    state: str  # "applies", "already applied", "conflicts"
    touched: list[str]  # files in torch/ the patch changes
    removed: int = 0  # audited findings gone from those files
    added: int = 0  # audited findings that appeared in them
    removed_excluded: int = 0  # findings gone from excluded modules (not in the audit)
    detail: str = ""


def series_effects(
    series: Series, target: InstalledTorch, exclusions: Exclusions
) -> tuple[list[PatchEffect], dict[str, bytes | None]]:
    """Each patch's effect, applied in order on a virtual copy; and the final contents.

    Each patch is planned alone against the state the previous ones left (the engine's
    cumulative dry run, one step at a time), so the files a patch touches are scanned right
    before and right after it: the removals are attributed to the patch that made them.
    """
    state: dict[str, bytes | None] = {}

    def read(path: str) -> bytes | None:
        return state[path] if path in state else target.read(path)

    effects = []
    for patch in series.patches:
        plan = plan_series(Series(series.directory, series.base, (patch,)), read, target.scope)
        outcome = plan.outcomes[0]
        touched = sorted({f.path for f in patch.files if target.scope(f.path) == "target"})
        effect = PatchEffect(patch.name, patch.subject, outcome.state, touched)
        if outcome.state == "applies":
            for path in touched:
                before = scan_bytes(path, read(path))
                after = scan_bytes(path, plan.files[path])
                gone, new = before - after, after - before
                if exclusions.entry_for(path) is None:
                    effect.removed += sum(gone.values())
                    effect.added += sum(new.values())
                else:
                    effect.removed_excluded += sum(gone.values())
            state.update({p: plan.files[p] for p in touched})
        else:
            effect.detail = "; ".join(f.describe() for f in outcome.failures) or outcome.state
        effects.append(effect)
    return effects, state


def patched_copy(
    torch_dir: Path, files: Iterable[str], final: dict[str, bytes | None], dest: Path
) -> Path:
    """Copy ``files`` (``torch/...``) under ``dest`` and write the series' final contents over
    them (None: deleted). Returns the copy's torch directory. Only the scanned files are copied,
    not the wheel's binaries."""
    base = torch_dir.parent
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base / rel, target)
    for rel, data in final.items():
        target = dest / rel
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return dest / torch_dir.name


# --------------------------------------------------------------------------- the audit


def subpackage(rel: str, depth: int = 2) -> str:
    """``torch/<name>`` for a file in a subpackage; top-level modules are grouped together."""
    parts = rel.split("/")
    if len(parts) <= depth:
        return TOP_LEVEL
    return "/".join(parts[:depth])


@dataclass
class Audit:
    """Everything the report shows; ``errors`` non-empty means the check failed."""

    torch_dir: str
    torch_version: str
    torch_commit: str | None
    series_dir: str
    files: int
    stock: list[Key]  # every finding, excluded ones included
    audited: list[Key]  # stock minus excluded
    patched: list[Key]  # audited findings with the series applied
    excluded: dict[str, Counter[str]]  # entry name -> {"findings": n, "files": n}
    kept: dict[str, int]  # [[kept]] entry name -> findings
    effects: list[PatchEffect]
    removed: Counter[Key]
    added: Counter[Key]
    errors: list[str]
    warnings: list[str]
    exclusions: Exclusions
    depth: int = 2


def compare(
    audited: Sequence[Key], patched: Sequence[Key], touched: set[str]
) -> tuple[Counter[Key], Counter[Key], list[str]]:
    """The findings removed and added by the series, and an error for each change in a file
    no patch touches (the scan or the copy is then not what the series did)."""
    before, after = Counter(audited), Counter(patched)
    removed, added = before - after, after - before
    errors = []
    for verb, changes in (("disappeared", removed), ("appeared", added)):
        for key, count in sorted(changes.items()):
            if key[0] not in touched:
                errors.append(
                    f"{count} finding(s) {verb} in {key[0]}, which no patch touches: "
                    f"{key[1]} {key[2]!r} at {key[3]!r}"
                )
    return removed, added, errors


def run_audit(
    torch_dir: Path,
    series_dir: Path,
    exclusions: Exclusions,
    jobs: int = 0,
    depth: int = 2,
) -> Audit:
    """Scan stock and patched, apply the exclusions, compare and check (see the module doc)."""
    target = InstalledTorch(torch_dir)
    warnings: list[str] = []
    if target.state_dir.exists():  # applied, or an interrupted apply/revert
        raise BadInput(
            f"{torch_dir}: the patch overlay is applied (record {target.state_dir}), so this "
            f"torch is not stock; run scripts/patches revert {torch_dir} first"
        )
    version, commit = target.version()
    series = load_series(series_dir)
    try:
        target.check_base(series.base)
    except BadInput as exc:
        warnings.append(str(exc))

    files, stock = scan_tree(torch_dir, jobs)
    entries = {rel: exclusions.entry_for(rel) for rel in files}
    excluded: dict[str, Counter[str]] = {e.name: Counter() for e in exclusions.exclude}
    for entry in entries.values():
        if entry is not None:
            excluded[entry.name]["files"] += 1
    audited = []
    for key in stock:
        entry = entries.get(key[0])
        if entry is None:
            audited.append(key)
        else:
            excluded[entry.name]["findings"] += 1
    kept = {e.name: sum(1 for key in audited if e.matches(key[0])) for e in exclusions.kept}

    effects, final = series_effects(series, target, exclusions)
    with tempfile.TemporaryDirectory(prefix="audit-torch-") as tmp:
        copy = patched_copy(torch_dir, files, final, Path(tmp))
        _, patched_all = scan_tree(copy, jobs)
    patched = [k for k in patched_all if exclusions.entry_for(k[0]) is None]

    touched = {path for e in effects if e.state == "applies" for path in e.touched}
    removed, added, errors = compare(audited, patched, touched)
    for effect in effects:
        if effect.state != "applies":
            errors.append(f"{effect.name}: {effect.state}: {effect.detail}")
    net_patches = sum(e.removed - e.added for e in effects)
    net_tree = sum(removed.values()) - sum(added.values())
    if net_patches != net_tree:
        errors.append(
            f"the patches remove {net_patches} findings net one by one, but the whole-tree scan "
            f"of the patched copy differs by {net_tree}"
        )
    return Audit(
        torch_dir=str(torch_dir),
        torch_version=version,
        torch_commit=commit,
        series_dir=str(series_dir),
        files=len(files),
        stock=stock,
        audited=audited,
        patched=patched,
        excluded=excluded,
        kept=kept,
        effects=effects,
        removed=removed,
        added=added,
        errors=errors,
        warnings=warnings,
        exclusions=exclusions,
        depth=depth,
    )


# --------------------------------------------------------------------------- reporting


def by_rule(keys: Iterable[Key]) -> Counter[str]:
    """Findings per rule id."""
    return Counter(key[1] for key in keys)


def by_subpackage(keys: Iterable[Key], depth: int = 2) -> Counter[str]:
    """Findings per ``torch/<subpackage>`` (see :func:`subpackage`)."""
    return Counter(subpackage(key[0], depth) for key in keys)


def to_json(audit: Audit) -> dict:
    """The counts as plain data (``--json``)."""
    stock_rules, patched_rules = by_rule(audit.audited), by_rule(audit.patched)
    stock_subs = by_subpackage(audit.audited, audit.depth)
    patched_subs = by_subpackage(audit.patched, audit.depth)
    return {
        "torch_dir": audit.torch_dir,
        "torch_version": audit.torch_version,
        "torch_commit": audit.torch_commit,
        "series": audit.series_dir,
        "files": audit.files,
        "totals": {
            "stock": len(audit.stock),
            "excluded": len(audit.stock) - len(audit.audited),
            "audited": len(audit.audited),
            "patched": len(audit.patched),
            "removed": sum(audit.removed.values()),
            "added": sum(audit.added.values()),
        },
        "by_rule": {
            rule: {"stock": stock_rules[rule], "patched": patched_rules[rule]}
            for rule in sorted(set(stock_rules) | set(patched_rules))
        },
        "by_rule_all_stock": dict(sorted(by_rule(audit.stock).items())),
        "by_subpackage": {
            sub: {"stock": stock_subs[sub], "patched": patched_subs[sub]}
            for sub in sorted(set(stock_subs) | set(patched_subs))
        },
        "excluded": [
            {
                "name": e.name,
                "paths": e.paths,
                "reason": e.reason,
                "findings": audit.excluded[e.name]["findings"],
                "files": audit.excluded[e.name]["files"],
            }
            for e in audit.exclusions.exclude
        ],
        "kept": [
            {"name": e.name, "paths": e.paths, "reason": e.reason, "findings": audit.kept[e.name]}
            for e in audit.exclusions.kept
        ],
        "patches": [
            {
                "name": e.name,
                "subject": e.subject,
                "state": e.state,
                "touched": e.touched,
                "removed": e.removed,
                "added": e.added,
                "removed_in_excluded_modules": e.removed_excluded,
                "detail": e.detail,
            }
            for e in audit.effects
        ],
        "errors": audit.errors,
        "warnings": audit.warnings,
    }


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table; columns of numbers (blank and bold cells allowed) are right-aligned."""
    rows = [list(row) for row in rows]

    def numeric(cell: object) -> bool:
        return isinstance(cell, int) or re.fullmatch(r"(\*\*-?\d+\*\*)?", str(cell)) is not None

    align = [
        "---:" if rows and all(numeric(row[i]) for row in rows) else "---"
        for i in range(len(header))
    ]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _code(text: str) -> str:
    """Source text as inline code inside a table cell (pipes escaped, backticks dropped)."""
    return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def render_tables(audit: Audit) -> str:
    """The Markdown tables: totals, per rule, per subpackage, exclusions, per patch, check."""
    data = to_json(audit)
    totals = data["totals"]
    out = [
        "### Totals\n",
        _table(
            ["", "findings"],
            [
                (f"stock torch, all {audit.files} files", totals["stock"]),
                ("in modules that are CUDA by design (excluded)", totals["excluded"]),
                ("**audited** (stock minus excluded)", f"**{totals['audited']}**"),
                ("with the patch series applied", totals["patched"]),
                ("removed by the series", totals["removed"]),
                ("added by the series", totals["added"]),
            ],
        ),
        "\n### Per rule\n",
        '"All modules" counts the excluded modules too; the rest are the audited findings.\n',
    ]
    rules = data["by_rule"]
    everything = data["by_rule_all_stock"]
    rows_by_rule: list[Sequence[object]] = []
    for r in sorted(set(rules) | set(everything)):
        c = rules.get(r, {"stock": 0, "patched": 0})
        rows_by_rule.append(
            (
                r,
                RULE_SUMMARIES.get(r, ""),
                everything.get(r, 0),
                c["stock"],
                c["patched"],
                c["stock"] - c["patched"],
            )
        )
    rows_by_rule.append(
        (
            "**all**",
            "",
            totals["stock"],
            totals["audited"],
            totals["patched"],
            totals["audited"] - totals["patched"],
        )
    )
    out.append(
        _table(
            ["rule", "finds", "all modules", "stock (audited)", "patched", "fixed"],
            rows_by_rule,
        )
    )
    subs = sorted(data["by_subpackage"].items(), key=lambda kv: (-kv[1]["stock"], kv[0]))
    top, rest = subs[:TOP_SUBPACKAGES], subs[TOP_SUBPACKAGES:]
    rows: list[Sequence[object]] = [
        (f"`{s}`", c["stock"], c["patched"], c["stock"] - c["patched"]) for s, c in top
    ]
    if rest:
        stock_rest = sum(c["stock"] for _, c in rest)
        patched_rest = sum(c["patched"] for _, c in rest)
        rows.append(
            (
                f"other ({len(rest)} subpackages)",
                stock_rest,
                patched_rest,
                stock_rest - patched_rest,
            )
        )
    out += [
        f"\n### Per subpackage (audited findings, top {TOP_SUBPACKAGES} by stock count)\n",
        _table(["subpackage", "stock", "patched", "fixed"], rows),
        "\n### Excluded: modules that are CUDA by design\n",
        "From `tools/audit_cuda_by_design.toml`; a file counts under the first entry that "
        "matches it.\n",
        _table(
            ["entry", "paths", "files", "findings", "reason"],
            [
                (
                    e["name"],
                    "<br>".join(f"`{p}`" for p in e["paths"]),
                    e["files"],
                    e["findings"],
                    e["reason"],
                )
                for e in data["excluded"]
            ]
            + [("**all**", "", sum(e["files"] for e in data["excluded"]), totals["excluded"], "")],
        ),
    ]
    if data["kept"]:
        out += [
            "\n### Considered and kept in the audit\n",
            _table(
                ["entry", "paths", "findings", "why it stays"],
                [
                    (
                        k["name"],
                        "<br>".join(f"`{p}`" for p in k["paths"]),
                        k["findings"],
                        k["reason"],
                    )
                    for k in data["kept"]
                ],
            ),
        ]
    out += [
        "\n### Per patch (`patches/series`, in order)\n",
        "Each patch is applied on the state the previous ones left; the files it touches are "
        'scanned right before and after it. "removed 0" means the scanner flags none of the '
        "sites the patch fixes (not every CUDA assumption is a pattern the rules know).\n",
        _table(
            ["patch", "state", "files in torch/", "removed", "added", "removed in excluded"],
            [
                (
                    f"`{p['name']}`",
                    p["state"],
                    "<br>".join(f"`{t}`" for t in p["touched"]) or "(none)",
                    p["removed"],
                    p["added"],
                    p["removed_in_excluded_modules"],
                )
                for p in data["patches"]
            ],
        ),
    ]
    changes = [("removed", k, n) for k, n in sorted(audit.removed.items())]
    changes += [("added", k, n) for k, n in sorted(audit.added.items())]
    if changes:
        out += [
            "\n### The findings the series removed and added (audited modules)\n",
            "A patch keeps the CUDA and CPU paths as they were, so its own new code can name "
            'them: a `... else "cuda"` fallback where no accelerator exists (the old default, '
            'so CPU-only machines behave as before) or a `device.type in ("cpu", "cuda")` fast '
            "path that keeps the float64 computation where it exists. The scanner cannot tell "
            "those from assumptions; each is argued in its patch's body, and the rows marked "
            '"added" below are exactly them.\n',
            _table(
                ["", "file", "rule", "line", "count"],
                [(verb, f"`{k[0]}`", k[1], _code(k[3]), n) for verb, k, n in changes],
            ),
        ]
    out += [
        "\n### Check: the difference is what the series changed\n",
    ]
    if audit.errors:
        out.append("**FAILED**:\n")
        out += [f"- {error}" for error in audit.errors]
    else:
        out.append(
            "Passed: every finding that disappeared (or appeared) with the series applied is in "
            "a file a patch touches, and the per-patch effects add up to the whole-tree "
            "difference."
        )
    for warning in audit.warnings:
        out.append(f"\nWarning: {warning}")
    return "\n".join(out) + "\n"


def render_doc(audit: Audit, command: str, when: datetime.datetime) -> str:
    """docs/audit.md: how it was made, then the tables."""
    commit = f" (git {audit.torch_commit[:12]})" if audit.torch_commit else ""
    names = ", ".join(f"`{e.name}`" for e in audit.effects) or "(empty)"
    return (
        "# Audit: CUDA assumptions in PyTorch itself\n\n"
        "Generated by `tools/audit_torch.py`; do not edit by hand. Regenerate with:\n\n"
        f"```sh\n{command}\n```\n\n"
        f"- date: {when.strftime('%Y-%m-%d %H:%M UTC')}\n"
        f"- torch: {audit.torch_version}{commit}, the installed wheel's `torch/` "
        f"({audit.files} `.py`/`.pyi` files)\n"
        f"- scanner: da-scan, every rule ({', '.join(rule_ids())}); `# noqa` comments in torch's "
        "source are honoured, as da-scan does\n"
        f"- series: {len(audit.effects)} patches from `patches/series`: {names}\n\n"
        '"Stock" is the wheel as installed. "Patched" is a copy of the scanned files with '
        "the series overlaid in a temporary directory by the patch queue's engine (the installed "
        "torch is not touched). Findings are matched by file, rule, message and the text of the "
        'flagged line, so lines shifted by a patch do not count as fixed. "Fixed" is stock minus '
        "patched. Subpackages are the first two path components; modules directly in torch/ are "
        f'grouped as "{TOP_LEVEL}".\n\n' + render_tables(audit)
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 audited and checked; 1 the check failed; 2 bad input."""
    parser = argparse.ArgumentParser(
        prog="python -m tools.audit_torch", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--torch", type=Path, help="torch package dir (default: the installed)")
    parser.add_argument("--series", type=Path, default=DEFAULT_SERIES, help="patches folder")
    parser.add_argument("--exclusions", type=Path, default=DEFAULT_EXCLUSIONS)
    parser.add_argument("--json", type=Path, help="write the counts as JSON here")
    parser.add_argument("--write-doc", type=Path, help="write the Markdown report (docs/audit.md)")
    parser.add_argument("--jobs", "-j", type=int, default=0, help="processes (default: cores)")
    args = parser.parse_args(argv)
    try:
        torch_dir = args.torch.resolve() if args.torch else find_torch()
        audit = run_audit(torch_dir, args.series, load_exclusions(args.exclusions), args.jobs)
    except (BadInput, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"audit_torch: {exc}", file=sys.stderr)
        return 2
    print(render_tables(audit), end="")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_json(audit), indent=2) + "\n", encoding="utf-8")
    if args.write_doc:
        shown = ["python -m tools.audit_torch"]
        if args.torch:
            shown += ["--torch", str(args.torch)]
        if args.series != DEFAULT_SERIES:
            shown += ["--series", str(args.series)]
        shown += ["--write-doc", str(args.write_doc)]
        command = ".venv/bin/" + " ".join(shown)
        now = datetime.datetime.now(datetime.UTC)
        args.write_doc.parent.mkdir(parents=True, exist_ok=True)
        args.write_doc.write_text(render_doc(audit, command, now), encoding="utf-8")
    for error in audit.errors:
        print(f"audit_torch: error: {error}", file=sys.stderr)
    return 1 if audit.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
