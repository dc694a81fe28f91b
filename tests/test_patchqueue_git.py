"""The patch queue on a PyTorch git checkout: a branch of commits made with git am -3 -k, and
HEAD, index, work tree and branch list exactly as before on every failure path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from patchqueue_fixtures import Project, git, git_state, make_project

from tools.patchqueue.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return make_project(tmp_path)


def run(project: Project, *args: str) -> int:
    return main(["--series", str(project.series), *args])


def test_apply_commits_the_series_on_a_new_branch_and_revert_returns(project, capsys) -> None:
    before = git_state(project.repo)
    assert run(project, "apply", str(project.repo)) == 0
    branch = f"device-agnostic/2.13.0-{project.base[:8]}"
    assert git(project.repo, "symbolic-ref", "--short", "HEAD").strip() == branch
    subjects = git(project.repo, "log", "--reverse", "--format=%s", "main..HEAD").splitlines()
    assert subjects == [
        "[amp] Default GradScaler to the current accelerator",
        "[checkpoint] Preserve RNG state on every accelerator",
        "[amp] Add a helper",
    ]
    assert (project.repo / "test" / "test_amp_default.py").is_file()
    capsys.readouterr()
    assert run(project, "status", str(project.repo)) == 0
    assert capsys.readouterr().out.count(": applied") == 3
    assert run(project, "apply", str(project.repo)) == 0  # twice: nothing to do
    assert "nothing to do" in capsys.readouterr().out
    assert len(git(project.repo, "log", "--format=%s", "main..HEAD").splitlines()) == 3
    assert run(project, "revert", str(project.repo)) == 0
    assert git_state(project.repo) == before


def test_check_on_a_checkout_reports_each_patch_and_changes_nothing(project, capsys) -> None:
    before = git_state(project.repo)
    assert run(project, "check", str(project.repo)) == 0
    assert capsys.readouterr().out.count(": applies") == 3
    assert git_state(project.repo) == before


def test_dirty_checkout_is_refused_and_untouched(project, capsys) -> None:
    init = project.repo / "torch" / "__init__.py"
    init.write_text(init.read_text() + "# local\n")
    before = git_state(project.repo)
    assert run(project, "apply", str(project.repo)) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    assert git_state(project.repo) == before


def test_conflict_rolls_back_head_index_tree_and_branches(project, capsys) -> None:
    scaler = project.repo / "torch" / "utils" / "checkpoint.py"
    scaler.write_text(scaler.read_text().replace("import contextlib\n", "import contextlib as c\n"))
    git(project.repo, "commit", "-q", "-am", "upstream moved on")
    before = git_state(project.repo)
    assert run(project, "apply", str(project.repo)) == 1
    err = capsys.readouterr().err
    assert "0002-checkpoint-Preserve-RNG-state-on-every-accelerator.patch (patch 2 of 3)" in err
    assert "torch/utils/checkpoint.py hunk 1" in err
    # Our file name and number only; no git am numbering, no advice to continue an am that the
    # tool has already aborted.
    assert "Patch failed at" not in err and "git am --" not in err and "hint:" not in err
    assert git_state(project.repo) == before
    assert not (project.repo / ".git" / "rebase-apply").exists()


def test_conflict_from_a_detached_head_returns_to_the_same_commit(project) -> None:
    scaler = project.repo / "torch" / "amp" / "grad_scaler.py"
    scaler.write_text(scaler.read_text().replace("class GradScaler:\n", "class Scaler:\n"))
    git(project.repo, "commit", "-q", "-am", "upstream moved on")
    git(project.repo, "checkout", "-q", "--detach")
    before = git_state(project.repo)
    assert run(project, "apply", str(project.repo)) == 1
    assert git_state(project.repo) == before


def test_existing_branch_is_refused(project, capsys) -> None:
    git(project.repo, "branch", "mine")
    before = git_state(project.repo)
    assert run(project, "apply", str(project.repo), "--branch", "mine") == 2
    assert "already exists" in capsys.readouterr().err
    assert git_state(project.repo) == before


def test_wrapper_script_runs_the_tool_and_returns_its_exit_status(project) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    args = ["--series", str(project.series), "check", str(project.repo)]
    done = subprocess.run(
        [str(ROOT / "scripts" / "patches"), *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "3 apply" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "tools.patchqueue", "check", str(project.series)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert bad.returncode == 2 and "neither a PyTorch git checkout" in bad.stderr


@pytest.mark.parametrize("command", ["apply", "export"])
def test_apply_and_export_share_one_checkout_rule(project, tmp_path, capsys, command) -> None:
    """Both refuse a checkout by the same rule (gitqueue.validate_checkout), with the same
    words: here, a git repository that is not PyTorch's, and a dirty one."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "README").write_text("x\n")
    git(other, "add", "-A")
    git(other, "-c", "user.name=T", "-c", "user.email=t@t.dev", "commit", "-q", "-m", "x")
    (other / "torch").mkdir()
    (other / "torch" / "x.py").write_text("")
    args = {
        "apply": ["apply", str(other)],
        "export": ["export", "--pytorch", str(other), "--out", str(tmp_path / "o")],
    }
    assert run(project, *args[command]) == 2
    err = capsys.readouterr().err
    if command == "export":  # apply's target recognition says it first, in its own words
        assert "not of PyTorch (no torch/__init__.py)" in err
    init = project.repo / "torch" / "__init__.py"
    init.write_text(init.read_text() + "# local\n")
    args = {
        "apply": ["apply", str(project.repo)],
        "export": ["export", "--pytorch", str(project.repo), "--out", str(tmp_path / "o")],
    }
    assert run(project, *args[command]) == 2
    assert (
        "the checkout has uncommitted changes; commit or stash them first"
        in capsys.readouterr().err
    )


def _hook(repo: Path, name: str, script: str) -> None:
    hook = repo / ".git" / "hooks" / name
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(0o755)


def test_a_git_am_killed_alone_is_reported_as_killed_and_leaves_no_added_file(
    project, capsys
) -> None:
    """git am dies of a signal while the tool lives (the OOM killer, a SIGINT sent to git only):
    exit 5 "killed", not a conflict; the files the half-applied patch added are gone."""
    # pre-applypatch runs with patch 3 applied to the tree (its new file there), before the
    # commit: the hook kills its git am.
    _hook(
        project.repo,
        "pre-applypatch",
        'if [ -e torch/_device_agnostic/__init__.py ]; then kill -KILL "$PPID"; fi\nexit 0\n',
    )
    before = git_state(project.repo)
    assert run(project, "apply", str(project.repo)) == 5
    err = capsys.readouterr().err
    assert "git am was killed by SIGKILL" in err and "not a conflict" in err
    assert "conflicts" not in err and "bad input" not in err
    assert not (project.repo / "torch" / "_device_agnostic").exists()
    assert git_state(project.repo) == before
    assert not (project.repo / ".git" / "rebase-apply").exists()


def test_recover_aborts_a_git_am_of_the_series_left_without_a_record(project, capsys) -> None:
    """A git am of the series left in progress (its record gone): recover sees .git/rebase-apply,
    aborts it and removes the new files it left."""
    before = git_state(project.repo)
    _hook(project.repo, "pre-applypatch",
          "[ -e torch/_device_agnostic/__init__.py ] && exit 1\nexit 0\n")  # fmt: skip
    patches = sorted(str(p) for p in project.series.glob("*.patch"))
    failed = subprocess.run(["git", "-C", str(project.repo), "am", "-3", "-k", *patches],
                            capture_output=True)  # fmt: skip
    assert failed.returncode != 0 and (project.repo / ".git" / "rebase-apply").is_dir()
    (project.repo / ".git" / "hooks" / "pre-applypatch").unlink()
    assert run(project, "recover", str(project.repo)) == 0
    out = capsys.readouterr().out
    assert "aborted a git am of the series left in progress" in out, out
    assert not (project.repo / ".git" / "rebase-apply").exists()
    assert git_state(project.repo) == before
