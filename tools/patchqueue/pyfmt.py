"""PyTorch's PYFMT linter, reproduced: usort, then ``ruff format``, with upstream's settings.

Upstream's ``tools/linter/adapters/pyfmt_linter.py`` rewrites a file with usort (import order,
``[tool.usort]`` of pytorch/pytorch's pyproject.toml) and then ``ruff format`` (its
``[tool.ruff]``, line length 88); a file is clean when neither changes anything. Both run here
as subprocesses, on copies in a scratch tree that mirrors the repository paths (so that usort
classifies ``torch`` and ``test`` as first party, as upstream does). The versions are pinned in
requirements.txt: usort as upstream's ``.lintrunner.toml`` pins it, ruff as this project does.

:func:`findings` compares a file before and after a change line by line, so that a line the
change adds (or reformats) is blamed even in a file upstream never kept formatted.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tools.patchqueue.errors import BadInput

RUFF_CONFIG = Path(__file__).with_name("pytorch_ruff.toml")
# pytorch/pytorch pyproject.toml [tool.usort] (read on 2026-12-04).
USORT_CONFIG = """\
[tool.usort]
preserve_inline_comments = true
collapse_blank_lines_in_category = false

[tool.usort.known]
first_party = ["caffe2", "torch", "torchgen", "functorch", "test"]
standard_library = ["typing_extensions"]
"""
# PyTorch's flake8 max-line-length: a line longer than this is a finding even where the
# formatter cannot shorten it (a long string or comment).
MAX_LINE = 120
FORMAT_LINE = 88


@dataclass(frozen=True)
class Finding:
    """One line a linter rejects, with what to do about it."""

    path: str
    line: int  # 1-based, in the file as the change leaves it
    code: str  # PYFMT, LONG, or a ruff rule id
    message: str
    fix: str

    def describe(self) -> str:
        """``test/x.py:12: PYFMT ...; fix: ...``."""
        return f"{self.path}:{self.line}: {self.code} {self.message}; fix: {self.fix}"


def _executable(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise BadInput(
            f"{name} is not installed: run scripts/bootstrap (requirements.txt pins it), or put "
            f"a {name} on PATH"
        )
    return found


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def format_texts(files: dict[str, str]) -> dict[str, str]:
    """Each file (repository path -> text) as PYFMT would rewrite it: usort, then ruff format.

    Raises BadInput when a tool fails on a file (a syntax error, naming the file).
    """
    if not files:
        return {}
    with tempfile.TemporaryDirectory(prefix="patches-pyfmt-") as tmp:
        root = Path(tmp)
        (root / "pyproject.toml").write_text(USORT_CONFIG, encoding="utf-8")
        for path, text in files.items():
            dest = root / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
        paths = sorted(files)
        usort = _run([_executable("usort"), "format", *paths], root)
        if usort.returncode != 0:
            raise BadInput(f"usort failed: {(usort.stderr or usort.stdout).strip()[-800:]}")
        ruff = _run(
            [_executable("ruff"), "format", "--config", str(RUFF_CONFIG), "--no-cache", *paths],
            root,
        )
        if ruff.returncode != 0:
            raise BadInput(f"ruff format failed: {(ruff.stderr or ruff.stdout).strip()[-800:]}")
        return {path: (root / path).read_text(encoding="utf-8") for path in paths}


def changed_lines(old: str | None, new: str) -> set[int]:
    """1-based numbers of the lines of ``new`` that are not in ``old`` (all when ``old`` is
    None): the lines a change adds or rewrites."""
    new_lines = new.splitlines()
    if old is None:
        return set(range(1, len(new_lines) + 1))
    result: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new_lines, autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            result.update(range(j1 + 1, j2 + 1))
    return result


def _unformatted(text: str, formatted: str) -> dict[int, str]:
    """Line number in ``text`` -> what PYFMT writes there instead, for every line it changes.

    An insertion (a missing blank line, a moved import) is charged to the line it goes before.
    """
    lines, good = text.splitlines(), formatted.splitlines()
    result: dict[int, str] = {}
    matcher = difflib.SequenceMatcher(None, lines, good, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        expected = "\n".join(good[j1:j2])
        if tag == "insert":
            target = min(i1 + 1, max(len(lines), 1))
            result.setdefault(target, f"insert before it: {expected}")
            continue
        for number in range(i1 + 1, i2 + 1):
            result.setdefault(number, expected)
    return result


def _short(text: str, limit: int = 160) -> str:
    flat = " / ".join(part.strip() for part in text.splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def findings(
    before: dict[str, str | None],
    after: dict[str, str],
    formatted: dict[str, str] | None = None,
    formatted_before: dict[str, str] | None = None,
) -> list[Finding]:
    """PYFMT and line-length findings of a change, file by file (``before[path]`` None: the file
    is new).

    A file PYFMT accepted before must be accepted after. In a file it did not accept (upstream
    keeps some unformatted), only the lines the change adds or rewrites count: each one PYFMT
    would rewrite, and each longer than PyTorch's flake8 limit.
    """
    formatted = formatted if formatted is not None else format_texts(after)
    olds = {p: t for p, t in before.items() if t is not None and p in after}
    if formatted_before is None:
        formatted_before = format_texts(olds)
    result: list[Finding] = []
    for path in sorted(after):
        text = after[path]
        old = before.get(path)
        was_clean = old is not None and formatted_before.get(path) == old
        added = changed_lines(old, text)
        bad = _unformatted(text, formatted[path])
        lines = text.splitlines()
        blamed = [n for n in sorted(bad) if was_clean or n in added]
        # One finding per rewritten block (consecutive lines PYFMT replaces by the same text).
        blocks: list[list[int]] = []
        for number in blamed:
            if blocks and blocks[-1][-1] == number - 1 and bad[blocks[-1][-1]] == bad[number]:
                blocks[-1].append(number)
            else:
                blocks.append([number])
        for block in blocks:
            width = max(len(lines[n - 1]) if n <= len(lines) else 0 for n in block)
            span = f"lines {block[0]}-{block[-1]}" if len(block) > 1 else "this line"
            what = f"usort + ruff format rewrite {span}"
            if width > FORMAT_LINE:
                what += f" ({width} columns; the limit is {FORMAT_LINE})"
            expected = bad[block[0]]
            fix = f"write {_short(expected)}" if expected else "delete it (PYFMT removes it)"
            result.append(Finding(path, block[0], "PYFMT", what, fix))
        for number in sorted(added - set(bad)):
            if number <= len(lines) and len(lines[number - 1]) > MAX_LINE:
                result.append(
                    Finding(
                        path,
                        number,
                        "LONG",
                        f"{len(lines[number - 1])} columns (PyTorch's flake8 allows {MAX_LINE})",
                        "split the string or comment",
                    )
                )
    return result
