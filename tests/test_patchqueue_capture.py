"""The edit loop: apply the series on a checkout, edit it there with git, ``capture`` it back
into the patch files; and the check that every patch's index lines match its content."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchqueue_fixtures import Project, git, make_project

from tools.patchqueue.capture import index_problems
from tools.patchqueue.cli import main
from tools.patchqueue.series import load_series
from tools.patchqueue.targets import GitCheckout


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def run(project: Project, *args: str) -> int:
    return main(["--series", str(project.series), *args])


def snapshot(series: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(series.iterdir())}


def test_capture_of_an_unedited_branch_changes_nothing(project, capsys) -> None:
    before = snapshot(project.series)
    assert run(project, "apply", str(project.repo)) == 0
    assert run(project, "capture", str(project.repo)) == 0
    assert capsys.readouterr().out.count(": unchanged") == 3
    assert snapshot(project.series) == before


def test_an_amended_commit_is_written_back_in_the_series_format(project, capsys) -> None:
    assert run(project, "apply", str(project.repo)) == 0
    repo = project.repo
    # Edit patch 2 of 3 with git: a fixup commit squashed into it by an interactive rebase.
    checkpoint = repo / "torch" / "utils" / "checkpoint.py"
    checkpoint.write_text(checkpoint.read_text().replace("# p2\n", "# p2, edited\n"))
    git(repo, "commit", "-q", "-a", "--fixup", "HEAD~1")
    git(repo, "-c", "sequence.editor=true", "rebase", "-q", "-i", "--autosquash", project.base)
    second = sorted(project.series.glob("0002-*.patch"))[0]
    old = second.read_text()
    before = snapshot(project.series)
    assert run(project, "capture", str(project.repo)) == 0
    out = capsys.readouterr().out
    assert f"{second.name}: rewritten" in out and out.count(": unchanged") == 2
    new = second.read_text()
    assert "+import contextlib  # p2, edited\n" in new
    # The header, subject and message are kept; only the diff (and its index line) changed.
    assert new.split("\n---\n")[0] == old.split("\n---\n")[0]
    assert [line for line in new.splitlines() if line.startswith("index ")] != [
        line for line in old.splitlines() if line.startswith("index ")
    ]
    changed = {k for k, v in snapshot(project.series).items() if before[k] != v}
    assert changed == {second.name}
    git(repo, "checkout", "-q", project.base)  # the captured series' index lines: fresh
    assert index_problems(load_series(project.series), GitCheckout(repo).read) == []


@pytest.mark.parametrize("edit", ["extra commit", "reworded"])
def test_a_branch_that_is_not_the_series_is_refused(project, capsys, edit) -> None:
    assert run(project, "apply", str(project.repo)) == 0
    repo = project.repo
    if edit == "extra commit":
        (repo / "torch" / "extra.py").write_text("X = 1\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "[amp] An extra change")
    else:
        git(repo, "commit", "-q", "--amend", "-m", "[amp] Another subject")
    before = snapshot(project.series)
    assert run(project, "capture", str(project.repo)) == 2
    err = capsys.readouterr().err
    expected = "has 4 commits" if edit == "extra commit" else "commit 3 of"
    assert expected in err, err
    assert snapshot(project.series) == before


def test_capture_without_an_applied_series_says_to_apply_first(project, capsys) -> None:
    assert run(project, "capture", str(project.repo)) == 2
    assert "run `scripts/patches apply" in capsys.readouterr().err


def test_a_stale_index_line_is_found(project) -> None:
    # A hand edit after format-patch: the added file's content changes, its index line does not.
    first = sorted(project.series.glob("0001-*.patch"))[0]
    first.write_text(first.read_text().replace("+    assert True\n", "+    assert 1 == 1\n"))
    series = load_series(project.series)
    base = GitCheckout(project.repo)
    (problem,) = index_problems(series, base.read)
    assert first.name in problem and "test/test_amp_default.py" in problem
    assert "new blob" in problem and "capture it again" in problem
