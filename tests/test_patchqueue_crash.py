"""The patch queue survives being killed at every one of its writes, on both kinds of target.

The tool counts every file-system write and every git command that changes a checkout
(tools/patchqueue/fsops.py); ``DA_PATCHES_FAULT_AT=N`` makes the N-th one SIGKILL the tool (and
the git it runs), or raise ENOSPC / EACCES. Each test first runs the command once with a trace
to learn how many points it has, then kills it at every one of them, on a fresh copy of the same
target, and runs the next command (a different one each time): the target must end
byte-identical to stock, or fully applied. Right after each kill, no file of the target may be
anything but its stock or its patched bytes (never truncated).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
from itertools import cycle
from pathlib import Path

import pytest
from patchqueue_fixtures import git_state, make_installed, make_project, tree_hash
from patchqueue_forked import ForkServer

from tools.patchqueue.cli import main
from tools.patchqueue.fsops import FSYNC, TMP_SUFFIX

ROOT = Path(__file__).resolve().parents[1]
# A kill loses nothing that fsync would save (tools/patchqueue/fsops.py): these tests skip it.
NO_FSYNC = {FSYNC: "0"}
NEXT_COMMANDS = ("status", "check", "apply", "revert", "recover")


def cli(series: Path, *args: str, **fault: str) -> subprocess.CompletedProcess[str]:
    """``python -m tools.patchqueue`` in its own session (so a kill takes its git too)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DA_PATCHES_")}
    env.update({f"DA_PATCHES_{k.upper()}": v for k, v in fault.items()}, **NO_FSYNC)
    return subprocess.run(
        [sys.executable, "-m", "tools.patchqueue", "--series", str(series), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=120,
        check=False,
    )


def run_here(series: Path, *args: str) -> tuple[int, str, str]:
    """The CLI in this process: (status, stdout, stderr). For the commands after a kill, which
    are not killed themselves: the tool keeps nothing between calls but what is on disk, and a
    run here costs a tenth of a new interpreter's start (the real series has about 600 points)."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.get(FSYNC)
    os.environ.update(NO_FSYNC)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["--series", str(series), *args])
    finally:
        if saved is None:
            del os.environ[FSYNC]
        else:
            os.environ[FSYNC] = saved
    return status, out.getvalue(), err.getvalue()


def fault_points(series: Path, *args: str, trace: Path) -> list[str]:
    """The labelled fault points one clean run of the command reaches."""
    trace.unlink(missing_ok=True)
    done = cli(series, *args, fault_trace=str(trace))
    assert done.returncode == 0, done.stderr
    return trace.read_text().splitlines()


def file_contents(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


def refill(pristine: Path, work: Path) -> None:
    """Make ``work`` a fresh copy of ``pristine`` (at the same path each time, so that records
    naming absolute paths compare equal)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(pristine, work, symlinks=True)


@pytest.fixture
def overlay_case(tmp_path: Path):
    """(series, pristine site-packages, work site-packages, stock hash, applied hash, applied
    contents)."""
    (tmp_path / "made").mkdir()
    project = make_project(tmp_path / "made")
    pristine = make_installed(tmp_path / "made", project).parent
    work = tmp_path / "work" / "site-packages"
    refill(pristine, work)
    stock = tree_hash(work)
    stock_files = file_contents(work / "torch")
    assert cli(project.series, "apply", str(work / "torch")).returncode == 0
    applied = tree_hash(work)
    applied_files = file_contents(work / "torch")
    applied_copy = tmp_path / "applied-site-packages"
    shutil.copytree(work, applied_copy, symlinks=True)
    return project.series, pristine, work, applied_copy, stock, applied, stock_files, applied_files


def assert_never_truncated(torch_dir: Path, stock: dict, applied: dict) -> None:
    """Every file is its stock or its patched self; a kill may leave one of the tool's own
    temporary files (never imported, removed by recovery)."""
    for name, data in file_contents(torch_dir).items():
        if name.endswith(TMP_SUFFIX):
            continue
        assert data in (stock.get(name), applied.get(name)), f"{name} is neither stock nor patched"


def test_kill_at_every_write_point_of_apply_on_an_installed_torch(overlay_case, tmp_path) -> None:
    series, pristine, work, _, stock, applied, stock_files, applied_files = overlay_case
    refill(pristine, work)
    points = fault_points(series, "apply", str(work / "torch"), trace=tmp_path / "trace")
    assert len(points) >= 20, points  # journal, backups, 3 target files, a test file, record
    outcomes = {"stock": 0, "applied": 0}
    for number, follow_up in zip(range(1, len(points) + 1), cycle(NEXT_COMMANDS)):
        refill(pristine, work)
        killed = cli(series, "apply", str(work / "torch"), fault_at=str(number))
        assert killed.returncode == -9, (points[number - 1], killed.stdout, killed.stderr)
        assert_never_truncated(work / "torch", stock_files, applied_files)
        after = cli(series, follow_up, str(work / "torch"))
        assert after.returncode == 0, (points[number - 1], follow_up, after.stderr)
        want = applied if follow_up == "apply" else stock
        assert tree_hash(work) == want, (points[number - 1], follow_up, after.stdout)
        outcomes["applied" if follow_up == "apply" else "stock"] += 1
        if tree_hash(work) == applied:  # and the record it left is a complete one
            assert cli(series, "revert", str(work / "torch")).returncode == 0
            assert tree_hash(work) == stock
    assert sum(outcomes.values()) == len(points)


def test_recovery_says_what_it_did(overlay_case, tmp_path) -> None:
    series, pristine, work, *_ = overlay_case
    refill(pristine, work)
    points = fault_points(series, "apply", str(work / "torch"), trace=tmp_path / "trace")
    middle = max(i for i, p in enumerate(points, 1) if "grad_scaler.py (half written)" in p)
    assert "backups" not in points[middle - 1]
    refill(pristine, work)
    assert cli(series, "apply", str(work / "torch"), fault_at=str(middle)).returncode == -9
    status = cli(series, "status", str(work / "torch"))
    assert "recovered: an interrupted apply of 3 patches was rolled back" in status.stdout
    assert "stock torch again" in status.stdout
    again = cli(series, "recover", str(work / "torch"))
    assert again.returncode == 0 and "nothing to recover" in again.stdout


def test_kill_at_every_write_point_of_revert_on_an_installed_torch(overlay_case, tmp_path) -> None:
    series, _, work, applied_copy, stock, applied, stock_files, applied_files = overlay_case
    refill(applied_copy, work)
    points = fault_points(series, "revert", str(work / "torch"), trace=tmp_path / "trace")
    assert len(points) >= 15, points
    stayed_applied = 0
    for number, follow_up in zip(range(1, len(points) + 1), cycle(NEXT_COMMANDS)):
        refill(applied_copy, work)
        killed = cli(series, "revert", str(work / "torch"), fault_at=str(number))
        assert killed.returncode == -9, points[number - 1]
        assert_never_truncated(work / "torch", stock_files, applied_files)
        after = cli(series, follow_up, str(work / "torch"))
        assert after.returncode == 0, (points[number - 1], follow_up, after.stderr)
        # Killed before the revert was recorded: still applied (revert then works); after: the
        # next command finished the revert (and `apply` applied again).
        if tree_hash(work) == applied:
            stayed_applied += 1
            assert cli(series, "revert", str(work / "torch")).returncode == 0
        assert tree_hash(work) == stock, (points[number - 1], follow_up, after.stdout)
    assert 0 < stayed_applied < len(points)


@pytest.mark.parametrize("kind", ["enospc", "eacces"])
def test_a_write_error_at_every_point_of_apply_is_rolled_back(overlay_case, tmp_path, kind) -> None:
    series, pristine, work, _, stock, *_ = overlay_case
    refill(pristine, work)
    points = fault_points(series, "apply", str(work / "torch"), trace=tmp_path / "trace")
    for number in range(1, len(points) + 1):
        refill(pristine, work)
        failed = cli(series, "apply", str(work / "torch"), fault_at=str(number), fault=kind)
        assert failed.returncode == 4, (points[number - 1], failed.stderr)
        assert "Traceback" not in failed.stderr
        assert "rolled back" in failed.stderr or "nothing was changed" in failed.stderr
        assert tree_hash(work) == stock, points[number - 1]


def test_a_rollback_that_cannot_write_keeps_the_journal_for_recover(overlay_case, tmp_path) -> None:
    series, pristine, work, _, stock, *_ = overlay_case
    refill(pristine, work)
    points = fault_points(series, "apply", str(work / "torch"), trace=tmp_path / "trace")
    # The last write of the apply (the test file) fails; so does the rollback's first write.
    last = max(i for i, p in enumerate(points, 1) if "test_amp_default.py (temporary" in p)
    refill(pristine, work)
    failed = cli(
        series, "apply", str(work / "torch"), fault_at=f"{last},{last + 1}", fault="eacces"
    )
    assert failed.returncode == 4 and "Traceback" not in failed.stderr
    assert "rolling back failed too" in failed.stderr and "scripts/patches recover" in failed.stderr
    recovered = cli(series, "recover", str(work / "torch"))
    assert recovered.returncode == 0 and "rolled back" in recovered.stdout
    assert tree_hash(work) == stock


def test_a_second_command_waits_then_names_the_holder(overlay_case) -> None:
    series, pristine, work, _, stock, *_ = overlay_case
    refill(pristine, work)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(work / "torch"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = cli(series, "--lock-wait", "0.3", "apply", str(work / "torch"))
        assert busy.returncode == 3, busy.stderr
        assert f"pid {holder.pid}" in busy.stderr and "Traceback" not in busy.stderr
        assert tree_hash(work) == stock
    finally:
        holder.kill()
        holder.wait()
    fd = os.open(work / "torch", os.O_RDONLY)  # the lock is free again once the holder died
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def test_two_applies_at_once_apply_once(overlay_case) -> None:
    series, pristine, work, _, _, applied, *_ = overlay_case
    refill(pristine, work)
    command = [sys.executable, "-m", "tools.patchqueue", "--series", str(series), "apply"]
    runs = [
        subprocess.Popen(
            [*command, str(work / "torch")],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(r.wait(timeout=60), r.stdout.read(), r.stderr.read()) for r in runs]
    assert [rc for rc, *_ in results] == [0, 0], results
    assert sum("nothing to do" in out for _, out, _ in results) == 1
    assert tree_hash(work) == applied


# --- git checkouts -----------------------------------------------------------------------------


@pytest.fixture
def git_case(tmp_path: Path):
    """(series, pristine checkout, work checkout (same path each time), state before)."""
    (tmp_path / "made").mkdir()
    project = make_project(tmp_path / "made")
    work = tmp_path / "work" / "pytorch"
    refill(project.repo, work)
    return project.series, project.repo, work, git_state(work)


def test_kill_at_every_point_of_apply_on_a_checkout(git_case, tmp_path) -> None:
    series, pristine, work, before = git_case
    points = fault_points(series, "apply", str(work), trace=tmp_path / "trace")
    assert any("git am" in p for p in points) and any("checkout -q -b" in p for p in points)
    refill(pristine, work)
    for number, follow_up in zip(range(1, len(points) + 1), cycle(NEXT_COMMANDS)):
        refill(pristine, work)
        assert cli(series, "apply", str(work), fault_at=str(number)).returncode == -9
        after = cli(series, follow_up, str(work))
        assert after.returncode == 0, (points[number - 1], follow_up, after.stderr)
        if follow_up == "apply":
            assert "applied 3 patches" in after.stdout
            assert cli(series, "revert", str(work)).returncode == 0
        assert git_state(work) == before, (points[number - 1], follow_up, after.stdout)


HOOK = """#!/bin/sh
# Kill the patches command (this hook's process group) while git am is at patch {k}{lock}.
# Hooks run at the top of the work tree.
count=$(cat .kill-count 2>/dev/null || echo 0)
count=$((count + 1))
echo $count > .kill-count
if [ "$count" = "{k}" ]; then
    {make_lock}
    kill -KILL 0
fi
"""


@pytest.mark.parametrize("hook", ["pre-applypatch", "post-applypatch"])
@pytest.mark.parametrize("stale_lock", [False, True])
def test_kill_inside_git_am_at_every_patch(git_case, hook, stale_lock) -> None:
    series, pristine, work, before = git_case
    for k in (1, 2, 3):
        refill(pristine, work)
        make_lock = "touch .git/index.lock" if stale_lock else ":"
        script = HOOK.format(k=k, lock=" holding index.lock" * stale_lock, make_lock=make_lock)
        hook_file = work / ".git" / "hooks" / hook
        hook_file.write_text(script)
        hook_file.chmod(0o755)
        killed = cli(series, "apply", str(work))
        assert killed.returncode == -9, (k, killed.stdout, killed.stderr)
        assert (work / ".git" / "rebase-apply").exists()  # git am was really in progress
        hook_file.unlink()
        (work / ".kill-count").unlink()
        after = cli(series, "status", str(work))
        assert after.returncode == 0, (k, after.stderr)
        assert "recovered: an interrupted apply was rolled back" in after.stdout
        assert ("index.lock" in after.stdout) == stale_lock
        assert git_state(work) == before, k


def test_kill_at_every_point_of_revert_on_a_checkout(git_case, tmp_path) -> None:
    series, pristine, work, before = git_case
    assert cli(series, "apply", str(work)).returncode == 0
    applied_copy = tmp_path / "applied-checkout"
    shutil.copytree(work, applied_copy, symlinks=True)
    applied = git_state(work)
    points = fault_points(series, "revert", str(work), trace=tmp_path / "trace")
    for number, follow_up in zip(range(1, len(points) + 1), cycle(NEXT_COMMANDS)):
        refill(applied_copy, work)
        assert cli(series, "revert", str(work), fault_at=str(number)).returncode == -9
        after = cli(series, follow_up, str(work))
        assert after.returncode == 0, (points[number - 1], follow_up, after.stderr)
        # Killed before the revert was recorded: still applied; after: the next command
        # finished the revert (and `apply` applied again, as new commits).
        if follow_up != "apply":
            assert git_state(work) in (before, applied), (points[number - 1], follow_up)
        assert cli(series, "revert", str(work)).returncode == 0
        assert git_state(work) == before, (points[number - 1], follow_up, after.stdout)


# --- the real series on a copy of the real installed torch ----------------------------------


def listing_hash(root: Path, read: set[str]) -> str:
    """Every path under ``root`` with its kind, mode and size, and the bytes of the files in
    ``read`` (paths relative to ``root``): the 2,000+ files of a real torch the series does not
    write are compared by size and mode, the files it writes (and every file it adds) by content.
    Plain strings and ``os.lstat``: this runs after each of the 600 kills."""
    digest = hashlib.sha256()
    prefix = len(str(root)) + 1
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            rel = path[prefix:]
            info = os.lstat(path)
            digest.update(f"{rel} {info.st_mode:o} {info.st_size}\n".encode())
            if rel in read and stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def all_files(root: Path) -> set[str]:
    return {
        os.path.relpath(os.path.join(folder, name), root)
        for folder, _, files in os.walk(root)
        for name in files
    }


@pytest.fixture(scope="module")
def real_copy(tmp_path_factory):
    """A shadow of the installed torch (copies of its 2,000+ .py files, links to the rest), the
    paths whose content is compared (what the series writes, and every file it adds: its
    record, backups and new files) and the stock and applied states."""
    from tools.patchqueue.series import load_series
    from tools.patchqueue.verify import build_shadow, installed_torch

    site = tmp_path_factory.mktemp("real") / "site-packages"
    build_shadow(installed_torch().torch_dir, site, bytecode=False)
    stock_full = tree_hash(site)
    stock_files = all_files(site)
    assert cli(SERIES, "apply", str(site / "torch")).returncode == 0
    written = {f.path for p in load_series(SERIES).patches for f in p.files}
    touched = (written & all_files(site)) | (all_files(site) - stock_files)
    assert len(touched) > 40 and len(touched) < len(stock_files) // 10, len(touched)
    applied = listing_hash(site, touched)
    assert cli(SERIES, "revert", str(site / "torch")).returncode == 0
    assert tree_hash(site) == stock_full
    return site, listing_hash(site, touched), applied, touched, stock_full


SERIES = ROOT / "patches"


@pytest.fixture(scope="module")
def forks():
    """Runs of the tool forked from a server that has it imported and the series parsed."""
    server = ForkServer(SERIES)
    yield server
    server.close()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["apply", "revert"])
def test_kill_at_every_write_point_of_the_real_series(real_copy, forks, tmp_path, command) -> None:
    site, stock, applied, touched, stock_full = real_copy
    torch_dir = str(site / "torch")

    def state() -> str:
        return listing_hash(site, touched)

    if command == "revert":
        assert run_here(SERIES, "apply", torch_dir)[0] == 0
    points = fault_points(SERIES, command, torch_dir, trace=tmp_path / "trace")
    assert len(points) > 80, len(points)  # 21 patches: backups, 18 files, 21 tests, records
    if command == "apply":
        assert run_here(SERIES, "revert", torch_dir)[0] == 0
    for number, follow_up in zip(range(1, len(points) + 1), cycle(NEXT_COMMANDS)):
        if command == "revert" and state() != applied:
            assert run_here(SERIES, "apply", torch_dir)[0] == 0
        killed = forks.run(
            ["--series", str(SERIES), command, torch_dir],
            {"DA_PATCHES_FAULT_AT": str(number), **NO_FSYNC},
        )
        assert killed == -9, points[number - 1]
        status, out, err = run_here(SERIES, follow_up, torch_dir)
        assert status == 0, (points[number - 1], follow_up, err)
        now = state()
        assert now in (stock, applied), (points[number - 1], follow_up, out)
        if now == applied and command == "apply":
            assert run_here(SERIES, "revert", torch_dir)[0] == 0
            assert state() == stock
    if state() == applied:
        assert run_here(SERIES, "revert", torch_dir)[0] == 0
    assert tree_hash(site) == stock_full


def test_shadow_refuses_an_installed_torch_left_by_a_killed_apply(overlay_case, tmp_path) -> None:
    from tools.patchqueue.errors import BadInput
    from tools.patchqueue.series import load_series
    from tools.patchqueue.targets import InstalledTorch
    from tools.patchqueue.verify import ensure_patched_shadow

    series, pristine, work, _, stock, *_ = overlay_case
    refill(pristine, work)
    points = fault_points(series, "apply", str(work / "torch"), trace=tmp_path / "trace")
    refill(pristine, work)
    middle = len(points) // 2
    assert cli(series, "apply", str(work / "torch"), fault_at=str(middle)).returncode == -9
    with pytest.raises(BadInput, match="interrupted"):
        ensure_patched_shadow(load_series(series), InstalledTorch(work / "torch"), tmp_path / "s")
    assert not (tmp_path / "s").exists()
    assert cli(series, "status", str(work / "torch")).returncode == 0  # recovers it
    assert tree_hash(work) == stock
