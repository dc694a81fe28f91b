"""Builders for the patch-queue tests: a small PyTorch-shaped git repository, a series made with
real ``git format-patch -k --zero-commit --no-signature``, a fake installed torch, tree hashes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch

from tools.patchqueue.targets import InstalledTorch

REAL_TORCH = Path(torch.__file__).parent
# Real files of the installed torch, so that real hunks are proven to apply.
REAL_FILES = ["amp/grad_scaler.py", "utils/checkpoint.py"]


# An upstream-shaped suite (owner line, imports, a class, the __main__ block) that a patch's
# standalone test can be folded into (tools/patchqueue/fold.py).
UPSTREAM_SUITE = """\
# Owner(s): ["module: amp"]

import unittest

import torch


class TestAmp(unittest.TestCase):
    def test_ones(self):
        self.assertEqual(torch.ones(2).sum().item(), 2.0)


if __name__ == "__main__":
    unittest.main()
"""


def git(root: Path, *args: str) -> str:
    """Run git in ``root``; returns stdout, raises on failure."""
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def tree_hash(root: Path, skip: tuple[str, ...] = (".git",)) -> str:
    """A hash of every path, file content and mode under ``root`` (folders included; a link is
    its target, never followed)."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = sorted(d for d in dirs if d not in skip and d not in links)
        rel = os.path.relpath(folder, root)
        digest.update(f"D {rel}\n".encode())
        for name in sorted(files + links):
            path = Path(folder, name)
            if path.is_symlink():
                digest.update(f"L {rel}/{name} -> {os.readlink(path)}\n".encode())
                continue
            digest.update(f"F {rel}/{name} {path.stat().st_mode:o}\n".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def git_state(root: Path) -> tuple[str, ...]:
    """HEAD, the current branch, the branch list, the status and the work tree hash."""
    return (
        git(root, "rev-parse", "HEAD"),
        subprocess.run(  # empty when detached
            ["git", "-C", str(root), "symbolic-ref", "-q", "HEAD"], capture_output=True, text=True
        ).stdout,
        git(root, "for-each-ref", "refs/heads"),
        git(root, "status", "--porcelain", "--untracked-files=all"),
        git(root, "diff", "--cached"),
        tree_hash(root),
    )


@dataclass
class Project:
    """A checkout at the base, the series made from it, and the base commit."""

    repo: Path
    series: Path
    base: str


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _edit(root: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, count))


def make_project(tmp: Path) -> Project:
    """A PyTorch-shaped repo and a three-patch series against its first commit.

    0001 changes GradScaler's default device and adds test/test_amp_default.py; 0002 changes
    torch/utils/checkpoint.py; 0003 changes grad_scaler.py again (cumulative on 0001) and adds a
    new module in a new package folder.
    """
    repo = tmp / "pytorch"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test.author@users.noreply.github.com")
    git(repo, "config", "commit.gpgsign", "false")
    _write(repo, "torch/__init__.py", '"""torch."""\n__version__ = "2.13.0"\n')
    _write(repo, "torch/version.py", "__version__ = '2.13.0'\ngit_version = 'unknown'\n")
    _write(repo, "torch/_tensor.py", "class Tensor:\n    pass\n")
    for rel in REAL_FILES:
        (repo / "torch" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REAL_TORCH / rel, repo / "torch" / rel)
    _write(repo, "test/test_amp.py", UPSTREAM_SUITE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "work")
    scaler = "torch/amp/grad_scaler.py"
    _edit(repo, scaler, 'device: str = "cuda",', 'device: str = "cuda",  # patched: default')
    _write(repo, "test/test_amp_default.py", "def test_default():\n    assert True\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "[amp] Default GradScaler to the current accelerator")
    _edit(repo, "torch/utils/checkpoint.py", "import contextlib\n", "import contextlib  # p2\n")
    git(repo, "commit", "-q", "-am", "[checkpoint] Preserve RNG state on every accelerator")
    _edit(repo, scaler, "class GradScaler:\n", "class GradScaler:  # p3\n")
    _write(repo, "torch/_device_agnostic/__init__.py", "HELPER = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "[amp] Add a helper")
    series = format_series(
        repo, base, tmp / "patches", f"# device-agnostic patch series\n# base: torch 2.13.0 {base}"
    )
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "work")
    return Project(repo, series, base)


def series_against_installed_torch(
    tmp: Path, base_files: list[str], commits: list[tuple[str, dict, dict]]
) -> Path:
    """A series made with real ``git format-patch`` against copies of the installed torch's
    ``base_files`` (repository paths such as ``torch/amp/grad_scaler.py``), based on its version
    and commit: one patch per ``(subject, edits, added)``, where ``edits`` maps a path to
    ``(old, new)`` text replaced once and ``added`` a new file's path to its text."""
    version, commit = InstalledTorch(REAL_TORCH).version()
    repo = tmp / "pytorch"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for key, value in (("user.name", "Test"), ("user.email", "test@example.com")):
        git(repo, "config", key, value)
    for path in base_files:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REAL_TORCH.parent / path, repo / path)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    for subject, edits, added in commits:
        for path, (old, new) in edits.items():
            text = (repo / path).read_text()
            assert old in text, (path, old)
            (repo / path).write_text(text.replace(old, new, 1))
        for path, text in added.items():
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
    return format_series(
        repo, base, tmp / "patches", f"# base: torch {version.split('+')[0]} {commit}"
    )


def format_series(repo: Path, base: str, series: Path, head: str) -> Path:
    """The commits of ``repo`` after ``base`` as a series folder: real ``git format-patch -k
    --zero-commit --no-signature`` files and a series file starting with ``head``."""
    git(
        repo, "format-patch", "-q", "-k", "--zero-commit", "--no-signature", "-o", str(series), base
    )
    names = sorted(p.name for p in series.glob("*.patch"))
    (series / "series").write_text(head + "\n" + "\n".join(names) + "\n")
    return series


def make_installed(tmp: Path, project: Project, version: str = "2.13.0+cpu") -> Path:
    """A copy of the checkout's torch/ laid out as site-packages/torch, at the base version."""
    site = tmp / "site-packages"
    shutil.copytree(project.repo / "torch", site / "torch")
    (site / "torch" / "version.py").write_text(
        f"__version__ = '{version}'\ngit_version = '{project.base}'\n"
    )
    (site / "torch" / "amp" / "grad_scaler.py").chmod(0o640)  # an odd mode must survive too
    return site / "torch"
