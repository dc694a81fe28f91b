"""export killed at every one of its fault points (each write of its record, each git command
that changes a branch; tools/patchqueue/fsops.py): the next export, or ``export --abort``,
removes what the killed one made (branches, its git worktree, temporary and output folders) and
then succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest
from patchqueue_fixtures import git, make_project
from test_patchqueue_crash import cli, fault_points, run_here

BRANCHES = ("for-each-ref", "--format=%(refname:short)", "refs/heads")


@pytest.mark.timeout(300)
def test_a_killed_export_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    repo, series = project.repo, project.series
    branches = git(repo, *BRANCHES)
    points = fault_points(
        series, "export", "--pytorch", str(repo), "--out", str(tmp_path / "trace-out"),
        trace=tmp_path / "trace",
    )  # fmt: skip
    assert len(points) >= 6, points
    git(repo, "branch", "-q", "-D", *[b for b in git(repo, *BRANCHES).split() if "/" in b])
    for number in range(1, len(points) + 1):
        out = tmp_path / f"out{number}"
        killed = cli(series, "export", "--pytorch", str(repo), "--out", str(out),
                     fault_at=str(number))  # fmt: skip
        assert killed.returncode == -9, (number, killed.stderr)
        if number % 2:
            status, printed, err = run_here(series, "export", "--pytorch", str(repo), "--abort")
            assert status == 0, err
            assert git(repo, *BRANCHES) == branches, (number, points[number - 1])
            assert git(repo, "worktree", "list").count("\n") == 1
            assert not out.exists()
            continue
        status, printed, err = run_here(series, "export", "--pytorch", str(repo), "--out", str(out))
        assert status == 0, (number, points[number - 1], err)
        assert "exported 3 patches" in printed
        made = [b for b in git(repo, *BRANCHES).split() if "/" in b]
        assert len(made) == 3 and git(repo, "worktree", "list").count("\n") == 1
        git(repo, "branch", "-q", "-D", *made)
