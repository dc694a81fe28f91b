"""Every command a user reads in README.md, docs/, CONTRIBUTING.md, benchmarks/README.md and the
product distributions' READMEs, checked exactly as written.

The commands are the lines of the fenced ``sh`` blocks (a trailing ``\\`` joins lines; ``#``
starts a comment). A cheap command runs for real: da-scan on a folder of this repository,
``--explain``, ``scripts/patches --help`` and ``check`` on the installed torch, and an expected
output shown in a ``text`` block right after its command's block must appear in what it prints.
An expensive one (a build, a conformance run, a benchmark, a network clone) must at least be well
formed: its script, module or folder exists, every ``--flag`` it passes is one its program
declares, and a commit it checks out is the series' base. A command no rule knows fails the test:
teach ``check_command`` about it (and keep it true) instead of writing an unchecked command.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [
    REPO / "README.md",
    REPO / "CONTRIBUTING.md",
    REPO / "benchmarks" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "packaging").glob("*/README.md")),
]
BIN = Path(sys.executable).parent
INSTALLED_TORCH = ".venv/lib/python3.11/site-packages/torch"
# Products a user can ask `scripts/bootstrap --only` for.
BOOTSTRAP_PRODUCTS = {"patches", "scan", "suite"}


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str
    expected: tuple[str, ...]  # lines of the `text` block after this block (last command only)

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def commands_of(path: Path) -> list[Command]:
    text = path.read_text()
    found: list[Command] = []
    fence = re.compile(r"^```(\w*)\n(.*?)^```\n?", re.S | re.M)
    blocks = list(fence.finditer(text))
    for index, block in enumerate(blocks):
        if block.group(1) not in ("sh", "bash"):
            continue
        expected: tuple[str, ...] = ()
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if (
            following
            and following.group(1) == "text"
            and not text[block.end() : following.start()].strip()
        ):
            expected = tuple(following.group(2).splitlines())
        first_line = text[: block.start(2)].count("\n") + 1
        joined, start = "", None
        lines = block.group(2).splitlines()
        in_block: list[Command] = []
        for offset, raw in enumerate(lines):
            start = first_line + offset if start is None else start
            if raw.rstrip().endswith("\\"):
                joined += raw.rstrip()[:-1] + " "
                continue
            joined += raw
            if joined.strip():
                in_block.append(Command(path.relative_to(REPO).as_posix(), start, joined, ()))
            joined, start = "", None
        if in_block and expected:
            last = in_block[-1]
            in_block[-1] = Command(last.doc, last.line, last.text, expected)
        found.extend(in_block)
    return found


ALL = [command for doc in DOCS for command in commands_of(doc)]


def words_of(command: Command) -> list[list[str]]:
    """The simple commands of a line (split at && and ;), without environment assignments,
    `time` prefixes and comments."""
    words = shlex.split(command.text, comments=True)
    parts: list[list[str]] = [[]]
    for word in words:
        if word in ("&&", ";", "||"):
            parts.append([])
        else:
            parts[-1].append(word)
    simple = []
    for part in parts:
        while part and (
            re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", part[0])
            or part[0]
            in (
                "time",
                "/usr/bin/time",
                "env",
                "nice",
            )
        ):
            part = part[1:]
        if part:
            simple.append(part)
    return simple


def run(args: list[str], cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        args,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@cache
def help_of(*program: str) -> str:
    """The --help text of a Python program of this repository (module and subcommand)."""
    result = run([sys.executable, "-m", *program, "--help"])
    assert result.returncode == 0, f"{' '.join(program)} --help: {result.stderr}"
    return result.stdout


@cache
def pytest_help() -> str:
    return run([sys.executable, "-m", "pytest", "--help"]).stdout


def flags(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("-") and w not in ("-", "--")]


def assert_flags_declared(words: list[str], help_text: str, what: str) -> None:
    for flag in flags(words):
        assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", help_text), f"{what}: no {flag}"


def series_base() -> str:
    match = re.search(
        r"^# base: torch \S+ ([0-9a-f]{40})$", (REPO / "patches/series").read_text(), re.M
    )
    assert match, "patches/series has no base line"
    return match.group(1)


def repository_path(word: str) -> Path | None:
    """The repository path a command argument names, if it is one that exists here."""
    if word.startswith(("~", "/", "-")):
        return None
    path = REPO / word
    return path if path.exists() else None


def check_scan(args: list[str], command: Command) -> str | None:
    assert_flags_declared(args, help_of("device_agnostic.scan"), "da-scan")
    paths = [a for a in args if not a.startswith("-")]
    fixing = {"--fix", "--diff"} & set(args)
    if "--explain" in args or (paths and not fixing and all(map(repository_path, paths))):
        result = run([sys.executable, "-m", "device_agnostic.scan", *args])
        assert result.returncode in (0, 1), f"{command}: exit {result.returncode}\n{result.stderr}"
        return result.stdout
    return None


def check_patches(args: list[str], command: Command) -> str | None:
    subcommands = re.search(r"\{([a-z,]+)\}", help_of("tools.patchqueue")).group(1).split(",")
    if args == ["--help"]:
        return run([sys.executable, "-m", "tools.patchqueue", "--help"]).stdout
    sub = next(a for a in args if not a.startswith("-"))
    assert sub in subcommands, f"{command}: no subcommand {sub} (has {subcommands})"
    assert_flags_declared(args, help_of("tools.patchqueue", sub), f"patches {sub}")
    if sub == "check" and args[1:] == [INSTALLED_TORCH]:
        import torch

        result = run(
            [sys.executable, "-m", "tools.patchqueue", "check", str(Path(torch.__file__).parent)]
        )
        assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
        return result.stdout
    if sub == "check" and "#" in command.text:
        # The comment quotes what a clean checkout prints: the count must be the series'.
        quoted = re.search(r'"(\d+) patches: (\d+) apply', command.text)
        if quoted:
            names = [
                n for n in (REPO / "patches/series").read_text().split() if n.endswith(".patch")
            ]
            assert int(quoted.group(1)) == int(quoted.group(2)) == len(names), command
    return None


def check_bootstrap(args: list[str], command: Command, tmp_path: Path) -> None:
    script = (REPO / "scripts" / "bootstrap").read_text()
    for flag in flags(args):
        assert flag in script.split("set -euo pipefail")[0], f"{command}: {flag} not in its usage"
    if "--only" in args:
        products = args[args.index("--only") + 1].split(",")
        assert set(products) <= BOOTSTRAP_PRODUCTS, command
        # The script itself accepts them: --check on a scratch root answers "out of date", not
        # "unknown product", and changes nothing.
        (tmp_path / "scripts").mkdir(exist_ok=True)
        shutil.copy2(REPO / "scripts" / "bootstrap", tmp_path / "scripts" / "bootstrap")
        env = dict(os.environ, BOOTSTRAP_PYTHON=sys.executable)
        result = subprocess.run(
            ["bash", str(tmp_path / "scripts" / "bootstrap"), *args, "--check"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert "out of date" in result.stderr, f"{command}: {result.stderr}"
        assert not (tmp_path / ".venv").exists()


def check_python(args: list[str], command: Command) -> None:
    import importlib.util

    if args[:1] == ["-m"]:
        module = args[1]
        if module == "venv":
            return
        spec = importlib.util.find_spec(module)
        assert spec is not None, f"{command}: no module {module}"
        rest = args[2:]
        if module == "pytest":
            for word in rest:
                if not word.startswith("-"):
                    assert repository_path(word.split("::")[0]), f"{command}: no {word}"
            assert_flags_declared(rest, pytest_help(), "pytest")
        elif spec.origin and flags(rest):
            source = Path(spec.origin).read_text()
            for flag in flags(rest):
                assert f'"{flag}"' in source, f"{command}: {module} has no {flag}"
        return
    script = repository_path(args[0])
    assert script and script.suffix == ".py", f"{command}: no script {args[0]}"
    source = script.read_text()
    for flag in flags(args[1:]):
        assert f'"{flag}"' in source, f"{command}: {args[0]} has no {flag}"


def check_pip(args: list[str], command: Command) -> None:
    assert args[0] == "install", command
    rest = args[1:]
    if rest[:1] == ["-r"]:
        assert repository_path(rest[1]), f"{command}: no {rest[1]}"
        return
    targets = [a for a in rest if not a.startswith("-")]
    assert targets, command
    for target in targets:
        assert target.startswith("./packaging/"), f"{command}: install from ./packaging/..."
        assert (REPO / target / "pyproject.toml").is_file(), f"{command}: no {target}"


def check_conformance(program: str, args: list[str], command: Command) -> None:
    if program == "conformance-report":
        assert_flags_declared(args, help_of("conformance.report"), program)
    elif args[:1] == ["init"]:
        init_help = run([sys.executable, "-m", "conformance.cli", "init", "--help"]).stdout
        assert_flags_declared(args[1:], init_help, "conformance init")
    else:
        assert_flags_declared(args, help_of("conformance.cli"), program)


def check_command(command: Command, tmp_path: Path) -> str | None:
    """Run or check one documented line; return what a command run for real printed."""
    printed = None
    for words in words_of(command):
        program, args = Path(words[0]).name, words[1:]
        if words[0].startswith("scripts/"):
            assert (REPO / words[0]).is_file(), f"{command}: no {words[0]}"
        if program == "da-scan":
            printed = check_scan(args, command)
        elif program in ("patches", "da-patches"):
            printed = check_patches(args, command)
        elif program == "bootstrap":
            check_bootstrap(args, command, tmp_path)
        elif program == "test":
            # Its own options are in its usage (and handled: `== --fast ]]`); the rest go to pytest.
            script = (REPO / "scripts/test").read_text()
            own = [
                f for f in flags(args) if f"scripts/test {f}" in script and f"== {f} ]]" in script
            ]
            assert_flags_declared([f for f in flags(args) if f not in own], pytest_help(), "pytest")
        elif program == "main":
            assert not args or args[0] == "--", command
        elif program in ("python", "python3", "python3.11"):
            check_python(args, command)
        elif program == "pip":
            check_pip(args, command)
        elif program in ("conformance", "conformance-report"):
            check_conformance(program, args, command)
        elif program == "pytest":
            assert args[:2] == ["--pyargs", "conformance"], command
            assert_flags_declared(args, pytest_help(), "pytest with the conformance plugin")
        elif program == "ruff":
            assert (BIN / "ruff").exists() and args[0] in ("check", "format"), command
        elif program == "git":
            if "checkout" in args:
                assert args[-1] == series_base(), f"{command}: not the series' base commit"
            else:
                assert args[:1] == ["clone"] and "github.com/pytorch/pytorch" in args[1], command
        elif program in ("mkdir", "cd"):
            pass
        else:
            pytest.fail(f"{command}: no rule checks '{program}'; add one to check_command")
    return printed


@pytest.mark.parametrize("command", ALL, ids=[f"{c.doc}:{c.line}" for c in ALL])
def test_documented_command_runs_or_is_well_formed(command: Command, tmp_path: Path) -> None:
    printed = check_command(command, tmp_path)
    if command.expected and printed is not None:
        for line in command.expected:
            if line.strip() and "..." not in line and "(...)" not in line:
                assert line.strip() in printed, f"{command}: expected {line!r} in\n{printed}"


def test_the_quick_starts_are_all_checked() -> None:
    """The README's four quick starts are among the commands above, one run for real each
    where that is cheap (the scanner's on a repository folder)."""
    readme = [c.text for c in ALL if c.doc == "README.md"]
    for needle in (
        "pip install ./packaging/conformance",
        "scripts/patches verify",
        "scripts/patches export",
        "da-scan tests/",
        "device_agnostic.neuron.demo",
    ):
        assert any(needle in text for text in readme), needle
    assert 150 <= len((REPO / "README.md").read_text().splitlines()) <= 250


def test_an_unknown_command_or_flag_fails_the_check(tmp_path: Path) -> None:
    for text in (
        "scripts/patches apply --no-such-flag ~/pytorch",
        "make install",
        "scripts/bootstrap --only backend",
    ):
        with pytest.raises((AssertionError, pytest.fail.Exception)):
            check_command(Command("x.md", 1, text, ()), tmp_path)
