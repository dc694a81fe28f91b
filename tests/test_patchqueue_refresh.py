"""refresh --onto: per patch, cumulatively, applies cleanly / applies with offset / already
upstream / conflicts, on synthetic sources (an installed torch of another version and a git
checkout); the patch files and the series' base are rewritten only when all apply and --write."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from patchqueue_fixtures import Project, git, make_project, tree_hash

from tools.patchqueue.cli import main
from tools.patchqueue.series import load_series

NEW_COMMIT = "5c4886908584029761b579af026dcfb627c84070"
SCALER = "amp/grad_scaler.py"
CHECKPOINT = "utils/checkpoint.py"


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def source(project: Project, tmp: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """An installed torch 2.14.1: the base's torch/ with ``edits`` (file -> old, new)."""
    torch = tmp / "new" / "site-packages" / "torch"
    shutil.copytree(project.repo / "torch", torch)
    (torch / "version.py").write_text(f"__version__ = '2.14.1+cpu'\ngit_version = '{NEW_COMMIT}'\n")
    for rel, (old, new) in edits.items():
        text = (torch / rel).read_text()
        assert old in text, (rel, old)
        (torch / rel).write_text(text.replace(old, new, 1))
    return torch


def refresh(project: Project, onto: Path, capsys, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["--series", str(project.series), "refresh", "--onto", str(onto), *extra])
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def rows(out: str) -> dict[str, str]:
    """patch name prefix (0001..) -> the state column of the report's table."""
    return {
        line.split("|")[1].strip()[:4]: line.split("|")[2].strip()
        for line in out.splitlines()
        if line.startswith("| 0")
    }


SHIFT = ("", "# upstream moved on\n" * 5)  # five lines at the top of the file


def test_shifted_lines_apply_with_offset_and_write_refreshes_the_series(project, tmp_path, capsys):
    onto = source(project, tmp_path, {CHECKPOINT: SHIFT})
    before = tree_hash(project.series)
    status, out = refresh(project, onto, capsys)
    assert status == 0
    assert rows(out) == {
        "0001": "applies cleanly",
        "0002": "applies with offset",
        "0003": "applies cleanly",
    }
    assert "torch/utils/checkpoint.py hunk 1 at offset +5 lines" in out
    assert "report only" in out and tree_hash(project.series) == before  # no --write
    status, out = refresh(project, onto, capsys, "--write")
    assert status == 0 and "rewrote 0002-" in out
    series = load_series(project.series)
    assert (series.base.version, series.base.commit) == ("2.14.1", NEW_COMMIT)
    second = series.patches[1].path.read_text()
    hunk = next(line for line in second.splitlines() if line.startswith("@@"))
    assert hunk.startswith("@@ -") and int(hunk.split()[1].split(",")[0][1:]) > 5
    # Refreshed: now every patch applies at its stated lines, and git agrees.
    status, out = refresh(project, onto, capsys)
    assert set(rows(out).values()) == {"applies cleanly"}
    scratch = tmp_path / "scratch"
    shutil.copytree(onto.parent, scratch)
    git(scratch, "init", "-q")
    for patch in series.patches:
        subprocess.run(
            ["git", "-C", str(scratch), "apply", "--check", "--include=torch/*", str(patch.path)],
            check=True,
        )


def test_a_patch_already_upstream_is_reported_and_nothing_is_written(project, tmp_path, capsys):
    onto = source(
        project, tmp_path, {CHECKPOINT: ("import contextlib\n", "import contextlib  # p2\n")}
    )
    before = tree_hash(project.series)
    status, out = refresh(project, onto, capsys, "--write")
    assert status == 1
    assert rows(out)["0002"] == "already upstream"
    assert rows(out)["0001"] == rows(out)["0003"] == "applies cleanly"
    assert "nothing written" in out
    assert tree_hash(project.series) == before


def test_a_conflict_names_the_file_and_hunk_and_nothing_is_written(project, tmp_path, capsys):
    conflict = ("class GradScaler:\n", "class GradScaler(object):\n")
    onto = source(project, tmp_path, {CHECKPOINT: SHIFT, SCALER: conflict})
    before = tree_hash(project.series)
    status, out = refresh(project, onto, capsys, "--write")
    assert status == 1
    assert rows(out) == {
        "0001": "applies cleanly",
        "0002": "applies with offset",
        "0003": "conflicts",
    }
    assert "torch/amp/grad_scaler.py hunk 1 (@@" in out and "context does not match" in out
    assert tree_hash(project.series) == before


def test_all_clean_with_write_only_moves_the_base_line(project, tmp_path, capsys) -> None:
    onto = source(project, tmp_path, {})
    patches = {p.name: p.read_bytes() for p in project.series.glob("*.patch")}
    status, out = refresh(project, onto, capsys, "--write")
    assert status == 0 and set(rows(out).values()) == {"applies cleanly"}
    assert {p.name: p.read_bytes() for p in project.series.glob("*.patch")} == patches
    assert f"# base: torch 2.14.1 {NEW_COMMIT}\n" in (project.series / "series").read_text()


def test_onto_a_git_checkout_uses_its_head_and_changes_nothing_there(project, capsys) -> None:
    repo = project.repo
    path = repo / "torch" / CHECKPOINT
    path.write_text(path.read_text().replace(*SHIFT, 1))
    git(repo, "commit", "-q", "-am", "upstream moved on")
    head = git(repo, "rev-parse", "HEAD").strip()
    before = tree_hash(repo, skip=())
    status, out = refresh(project, repo, capsys, "--write")
    assert status == 0 and rows(out)["0002"] == "applies with offset"
    assert tree_hash(repo, skip=()) == before
    assert f"# base: torch 2.13.0 {head}\n" in (project.series / "series").read_text()
