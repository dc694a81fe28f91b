"""``scripts/patches verify``: the real series is proven (on neuron, and without it on the CPU
through a CI device or a named mock; lint clean), a patch whose test does not fail on stock torch
is unproven, and the installed torch is never modified."""

from __future__ import annotations

import hashlib
import json
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from patchqueue_fixtures import REAL_TORCH, series_against_installed_torch, tree_hash

from tools.patchqueue.cli import DEFAULT_SERIES, main
from tools.patchqueue.errors import BadInput
from tools.patchqueue.series import Base, FilePatch, Hunk, Patch, Series, load_series
from tools.patchqueue.targets import InstalledTorch
from tools.patchqueue.testrun import Run, WarmRunners, run_test_file
from tools.patchqueue.verify import (
    PatchVerdict,
    _judge,
    build_shadow,
    ensure_patched_shadow,
    openreg_cell,
    openreg_not_applicable,
    verify_series,
)
from tools.patchqueue.verify import TestResult as FileResult  # not a pytest class


def touched_hashes(series_dir: Path) -> dict[str, str | None]:
    """sha256 of every torch/ file the series touches in the installed torch."""
    hashes: dict[str, str | None] = {}
    for patch in load_series(series_dir).patches:
        for fpatch in patch.files:
            if fpatch.path.startswith("torch/"):
                path = REAL_TORCH.parent / fpatch.path
                hashes[fpatch.path] = (
                    hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
                )
    return hashes


@pytest.mark.slow
@pytest.mark.patch_verify
@pytest.mark.timeout(1200)
def test_every_patch_is_proven_and_the_installed_torch_is_unchanged(tmp_path: Path, capsys) -> None:
    before = touched_hashes(DEFAULT_SERIES)
    assert before and all(before.values())
    report_file = tmp_path / "verify.json"
    status = main(["verify", "--json", str(report_file)])
    out = capsys.readouterr().out
    print(out)
    assert status == 0, out
    report = json.loads(report_file.read_text())
    names = [p.name for p in load_series(DEFAULT_SERIES).patches]
    assert [p["patch"] for p in report["patches"]] == names
    for patch in report["patches"]:
        assert patch["verdict"] == "proven", patch["reasons"]
        assert patch["tests"], patch["patch"]
        for test in patch["tests"]:
            assert test["stock_neuron"]["outcome"] == "failed"
            assert test["patched_neuron"]["outcome"] == test["patched_cpu"]["outcome"] == "passed"
        # Upstream CI never runs neuron: some test fails before the fix without it.
        assert any(t["stock_cpu"]["failing"] for t in patch["tests"]), patch["patch"]
        assert patch["lint"] and all(not f["findings"] for f in patch["lint"])
    assert report["all_proven"] is True
    assert report["shadow_probe"]["backend"] == "neuron"
    assert "| patch " in out and out.count("| proven ") == len(names)
    assert touched_hashes(DEFAULT_SERIES) == before


PASSING_TEST = """\
# Owner(s): ["module: amp"]
import unittest

import torch


class TestAlwaysPasses(unittest.TestCase):
    def test_passes(self):
        self.assertEqual(torch.ones(2).sum().item(), 2.0)


if __name__ == "__main__":
    unittest.main()
"""


def make_synthetic_series(tmp: Path) -> Path:
    """Two real patches against the installed torch's grad_scaler.py: 0001 adds a test that passes
    on stock torch too, 0002 adds no test. Based on the installed torch's version and commit."""
    scaler = "torch/amp/grad_scaler.py"
    return series_against_installed_torch(
        tmp,
        [scaler],
        [
            (
                "[amp] A change whose test proves nothing",
                {scaler: ("class GradScaler:\n", "class GradScaler:  # p1\n")},
                {"test/test_always_passes.py": PASSING_TEST},
            ),
            (
                "[amp] A change without a test",
                {scaler: ("class GradScaler:  # p1\n", "class GradScaler:  # p2\n")},
                {},
            ),
        ],
    )


@pytest.mark.patch_verify
@pytest.mark.timeout(600)
def test_a_patch_whose_test_passes_on_stock_torch_is_unproven(tmp_path: Path, capsys) -> None:
    series = make_synthetic_series(tmp_path)
    before = touched_hashes(series)
    report_file = tmp_path / "verify.json"
    status = main(["verify", "--series", str(series), "--json", str(report_file)])
    out = capsys.readouterr().out
    assert status == 1, out
    report = json.loads(report_file.read_text())
    first, second = report["patches"]
    assert first["verdict"] == "unproven"
    assert "does not fail on stock torch" in first["reasons"][0]
    assert any("without the neuron backend" in reason for reason in first["reasons"])
    (test,) = first["tests"]
    assert test["stock_neuron"]["outcome"] == "passed"
    assert test["patched_neuron"]["outcome"] == "passed"
    assert second["verdict"] == "unproven" and second["tests"] == []
    assert "adds no test" in second["reasons"][0]
    assert report["all_proven"] is False
    assert out.count("| unproven |") == 2
    assert touched_hashes(series) == before


def test_the_shadow_copies_python_files_and_links_everything_else(tmp_path: Path) -> None:
    real = tmp_path / "site" / "torch"
    (real / "amp").mkdir(parents=True)
    (real / "lib").mkdir()
    (real / "__init__.py").write_text("X = 1\n")
    (real / "amp" / "__init__.py").write_text("")
    (real / "amp" / "grad_scaler.py").write_text("Y = 2\n")
    (real / "amp" / "data.json").write_text("{}")
    (real / "_C.so").write_bytes(b"\x7fELF")
    (real / "lib" / "libtorch.so").write_bytes(b"\x7fELF")
    # Bytecode as pip compiles it (checked against the source), and one that is never checked.
    for path in real.rglob("*.py"):
        py_compile.compile(str(path), doraise=True)
    unchecked = py_compile.PycInvalidationMode.UNCHECKED_HASH
    py_compile.compile(str(real / "__init__.py"), doraise=True, invalidation_mode=unchecked)
    (real / "amp" / "autocast.py").write_text("Z = 1\n")
    py_compile.compile(str(real / "amp" / "autocast.py"), doraise=True)
    rewritten = ["torch/amp/autocast.py"]  # what a series writes
    shadow = build_shadow(real, tmp_path / "shadow", rewritten=rewritten)
    assert shadow == tmp_path / "shadow" / "torch"
    for rel in ("__init__.py", "amp/grad_scaler.py"):
        assert (
            not (shadow / rel).is_symlink()
            and (shadow / rel).read_bytes() == (real / rel).read_bytes()
        )
    assert not (shadow / "amp").is_symlink()
    for rel in ("lib", "_C.so", "amp/data.json"):
        assert (shadow / rel).is_symlink() and (shadow / rel).resolve() == (real / rel).resolve()
    tag = sys.implementation.cache_tag
    assert (shadow / "amp" / "__pycache__" / f"grad_scaler.{tag}.pyc").is_file()
    assert not (shadow / "__pycache__").exists()  # unchecked: a patched source would not count
    # The file the series rewrites has no bytecode: a rewrite in the same second, to the same
    # size, is imported from its source (a copied .pyc would pass Python's mtime+size check).
    assert not list((shadow / "amp" / "__pycache__").glob("autocast.*"))
    (shadow / "amp" / "autocast.py").write_text("Z = 2\n")
    code = "import torch.amp.autocast as a; print(a.Z)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(shadow.parent), "PYTHONDONTWRITEBYTECODE": "1"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "2"


@pytest.fixture(scope="module")
def warm_runners(tmp_path_factory):
    runners = WarmRunners(tmp_path_factory.mktemp("warm"))
    yield runners
    runners.close()


@pytest.fixture(params=["fresh", "warm"])
def run_file(request, warm_runners: WarmRunners):
    """A test file run as `python FILE`, or in a fork of a warm interpreter (verify's default)."""
    if request.param == "fresh":
        return run_test_file
    assert not warm_runners.cold, warm_runners.cold
    return warm_runners.run


@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        ("self.assertTrue(True)", "passed"),
        ("self.assertTrue(False)", "failed"),
        ("raise ValueError('x')", "failed"),
    ],
)
def test_a_test_file_run_is_classified(tmp_path: Path, run_file, body: str, outcome: str) -> None:
    path = tmp_path / "test_x.py"
    path.write_text(
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_x(self):\n"
        f"        {body}\n\nunittest.main()\n"
    )
    run = run_file(path, {"PATH": "/usr/bin:/bin"}, tmp_path, timeout=60)
    assert run.outcome == outcome, run.tail
    assert run.ran == 1


def test_a_crashing_or_hanging_test_file_is_no_proof(tmp_path: Path, run_file) -> None:
    crash = tmp_path / "test_crash.py"
    crash.write_text("raise ImportError('no such module')\n")
    assert run_file(crash, {}, tmp_path, timeout=60).outcome == "error"
    hang = tmp_path / "test_hang.py"
    hang.write_text(
        "import subprocess, sys, time\nsubprocess.Popen(['sleep', '60'])\ntime.sleep(60)\n"
    )
    assert run_file(hang, {}, tmp_path, timeout=1).outcome == "timeout"
    # The warm interpreter survives its killed child and runs the next file.
    passing = tmp_path / "test_pass.py"
    passing.write_text(PASSING_TEST)
    assert run_file(passing, {}, tmp_path, timeout=60).outcome == "passed"


# What `python FILE` sets, which a fork of a warm interpreter must set alike.
AS_A_SCRIPT = """\
import atexit, os, sys, threading, unittest

import torch

def report():
    print("atexit ran; thread joined:", not worker.is_alive(), flush=True)

atexit.register(report)
worker = threading.Thread(target=lambda: __import__("time").sleep(0.5))

class T(unittest.TestCase):
    def test_main(self):
        self.assertEqual(__name__, "__main__")
        self.assertEqual(os.path.realpath(sys.argv[0]), os.path.realpath(__file__))
        self.assertEqual(sys.path[0], os.path.dirname(__file__))
        self.assertEqual(os.getcwd(), os.environ["EXPECTED_CWD"])
        self.assertEqual(os.environ["MARKER"], "1")
        self.assertEqual(sys.stdin.read(), "")
        print("to stdout"); print("to stderr", file=sys.stderr)
        os.write(1, b"fd 1\\n"); os.write(2, b"fd 2\\n")

if __name__ == "__main__":
    worker.start()
    unittest.main(exit=False)
    sys.exit(3)
"""


def test_a_file_runs_in_a_warm_fork_as_python_file_runs_it(tmp_path: Path, run_file) -> None:
    folder = tmp_path / "test"
    folder.mkdir()
    path = folder / "test_script.py"
    path.write_text(AS_A_SCRIPT)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {"PATH": "/usr/bin:/bin", "MARKER": "1", "EXPECTED_CWD": str(cwd)}
    run = run_file(path, env, cwd, timeout=120)
    assert run.returncode == 3 and run.ran == 1 and run.outcome == "error", run.tail
    for line in ("to stdout", "to stderr", "fd 1", "fd 2", "atexit ran; thread joined: True"):
        assert line in run.tail, run.tail


def test_an_environment_that_cannot_import_torch_runs_its_files_fresh(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('a broken torch')\n")
    path = tmp_path / "test_pass.py"
    path.write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_x(self):\n        pass\n\n\nunittest.main()\n"
    )
    runners = WarmRunners(tmp_path)
    try:
        run = runners.run(path, {"PYTHONPATH": str(broken)}, tmp_path, timeout=60)
    finally:
        runners.close()
    assert run.outcome == "passed", run.tail
    (why,) = runners.cold.values()
    assert "a broken torch" in why


def fake_torch(tmp: Path) -> tuple[InstalledTorch, Series]:
    """A tiny installed torch (lib/ holds no .py, so the shadow links it) and a one-patch series
    that creates torch/lib/new.py, i.e. writes through a link of the shadow."""
    torch_dir = tmp / "site" / "torch"
    (torch_dir / "lib").mkdir(parents=True)
    (torch_dir / "lib" / "libtorch.so").write_bytes(b"\x7fELF")
    (torch_dir / "__init__.py").write_text("")
    (torch_dir / "_tensor.py").write_text("")
    (torch_dir / "version.py").write_text("__version__ = '2.13.0'\ngit_version = 'abc1234'\n")
    hunk = Hunk(1, "@@ -0,0 +1 @@", 0, 1, (), ("X = 1\n",))
    patch = Patch(
        "0001-x.patch",
        tmp / "0001-x.patch",
        "0" * 64,
        "[x] X",
        (FilePatch("torch/lib/new.py", "added", (hunk,)),),
    )
    return InstalledTorch(torch_dir), Series(tmp, Base("2.13.0", "abc1234"), (patch,))


def test_verify_refuses_to_write_through_a_link_into_the_installed_torch(tmp_path: Path) -> None:
    target, series = fake_torch(tmp_path)
    before = tree_hash(target.site_packages)
    with pytest.raises(BadInput, match="torch/lib/new.py: in the shadow torch this is a link"):
        verify_series(series, torch=target)
    assert tree_hash(target.site_packages) == before
    assert not (target.torch_dir / "lib" / "new.py").exists()


def test_verify_refuses_an_installed_torch_that_carries_an_overlay(tmp_path: Path) -> None:
    target, series = fake_torch(tmp_path)
    target.state_dir.mkdir()
    with pytest.raises(BadInput, match="stock runs would not be stock"):
        verify_series(series, torch=target)


def test_patch_tests_run_outside_pytorchs_ci_mode(monkeypatch):
    # Under CI=true torch's run_tests wants xmlrunner and PyTorch's CI lists; verify must not.
    from tools.patchqueue import verify

    monkeypatch.setenv("CI", "true")
    assert "CI" not in verify._env(None)
    assert "CI" not in verify._env("/tmp/shadow", autoload=False)


def test_shadow_is_built_once_reused_rebuilt_when_the_series_changes(tmp_path: Path) -> None:
    series_dir = make_synthetic_series(tmp_path / "a")
    series = load_series(series_dir)
    real = InstalledTorch(REAL_TORCH)
    before = tree_hash(REAL_TORCH / "amp")
    root, built = ensure_patched_shadow(series, real, tmp_path / "shadow")
    assert built and "# p2" in (root / "torch" / "amp" / "grad_scaler.py").read_text()
    marker = root / "torch" / "marker.py"
    marker.write_text("")  # survives only while the shadow is reused
    assert ensure_patched_shadow(series, real, tmp_path / "shadow") == (root, False)
    assert marker.exists()
    shorter = Series(series.directory, series.base, series.patches[:1])
    assert ensure_patched_shadow(shorter, real, tmp_path / "shadow") == (root, True)
    assert not marker.exists()
    assert "# p1" in (root / "torch" / "amp" / "grad_scaler.py").read_text()
    assert tree_hash(REAL_TORCH / "amp") == before


def test_shadow_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    series = load_series(make_synthetic_series(tmp_path))
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("data")
    with pytest.raises(BadInput, match="was not made by `patches shadow`; give a new folder"):
        ensure_patched_shadow(series, InstalledTorch(REAL_TORCH), foreign)
    assert (foreign / "keep.txt").read_text() == "data"


OPENREG_PYTHON = Path("/work/openreg-venv/bin/python")
OPENREG_TEST = """\
# Owner(s): ["module: PrivateUse1"]

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import run_tests, TestCase


class TestMarker(TestCase):
    def test_marker(self, device):
        self.assertTrue(getattr(torch.amp.grad_scaler, "MARKER_D", False))


instantiate_device_type_tests(TestMarker, globals(), only_for=("privateuse1",))

if __name__ == "__main__":
    run_tests()
"""


def _run(outcome: str, failing: tuple[str, ...] = ()) -> Run:
    summary = (
        "OK (1 passed, 0 skipped)" if outcome == "passed" else f"FAILED (failures={len(failing)})"
    )
    return Run(outcome, 0 if outcome == "passed" else 1, 1, 0, 1.0, summary, list(failing))


def _openreg_result(stock: Run, patched: Run) -> FileResult:
    passed = _run("passed")
    cpu_failure = _run("failed", ("FAIL: TestXMock.test_x",))
    return FileResult("test/test_x.py", _run("failed", ("FAIL: TestX.test_x",)), passed,
                      cpu_failure, passed, stock, patched)  # fmt: skip


def test_the_openreg_column_tells_device_failures_mocks_and_a_stock_pass_apart() -> None:
    """The column shows a failure of the device's tests, a failure of ...Mock classes only (which
    fail on any build) with their classes, a stock pass (no proof, a reason: not proven) and a
    patch that declared why its tests cannot run there."""
    passed = _run("passed")
    device = _run("failed", ("FAIL: TestX.test_a_openreg", "FAIL: TestXMock.test_b"))
    assert openreg_cell([_openreg_result(device, passed)]) == "fails (2), passes after"
    mocks = _run("failed", ("FAIL: TestXMock.test_a", "ERROR: TestYMock.test_b"))
    assert openreg_cell([_openreg_result(mocks, passed)]) == (
        "mocks only (2): TestXMock, TestYMock, passes after"
    )
    assert openreg_cell([_openreg_result(device, device)]) == "fails (2), NOT passing after"
    assert openreg_cell([], "needs the neuron backend") == (
        "not applicable: needs the neuron backend"
    )
    verdict = PatchVerdict("0001-x.patch", "[x] X", tests=[_openreg_result(passed, passed)])
    _judge(verdict)
    assert verdict.cells()[3] == "no: OK (1 passed, 0 skipped), passes after"
    assert verdict.verdict == "failed"
    assert any("does not fail before on OpenReg" in r for r in verdict.reasons), verdict.reasons
    proven = PatchVerdict("0001-x.patch", "[x] X", tests=[_openreg_result(device, passed)])
    _judge(proven)
    assert proven.verdict == "proven", proven.reasons


def _patch_with_trailers(tmp_path: Path, trailers: str) -> Patch:
    path = tmp_path / "0001-x.patch"
    path.write_text(
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Test <test@example.com>\nDate: Fri, 4 Dec 2026 23:00:51 +0000\n"
        f"Subject: [x] X\n\nWhy.\n\nBug: none\n{trailers}---\n"
    )
    return Patch(path.name, path, "0" * 64, "[x] X", ())


def test_an_openreg_trailer_must_say_not_applicable_and_why(tmp_path: Path) -> None:
    assert openreg_not_applicable(_patch_with_trailers(tmp_path, "")) is None
    reason = "OpenReg: not applicable: the test needs the neuron backend\n"
    assert openreg_not_applicable(_patch_with_trailers(tmp_path, reason)) == (
        "the test needs the neuron backend"
    )
    for bad in ("OpenReg: skip\n", "OpenReg: not applicable:\n", reason + reason):
        with pytest.raises(BadInput, match="OpenReg: not applicable: <why"):
            openreg_not_applicable(_patch_with_trailers(tmp_path, bad))


def _marker_test(marker: str, body: str) -> str:
    return f"""\
# Owner(s): ["module: amp"]

import torch
from torch.testing._internal.common_utils import run_tests, TestCase


class TestMarker(TestCase):
    def test_marker(self):
        accelerator = torch.accelerator.current_accelerator()
{body}
        x = torch.ones(1, device=accelerator or "cpu")
        self.assertEqual(x.device.type, getattr(accelerator, "type", "cpu"))
        self.assertTrue(getattr(torch.amp.grad_scaler, "{marker}", False))


if __name__ == "__main__":
    run_tests()
"""


@pytest.mark.slow
@pytest.mark.patch_verify
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    not OPENREG_PYTHON.exists(), reason="no OpenReg environment (see docs/patch-queue.md)"
)
def test_verify_runs_every_test_on_openreg_and_shows_a_failed_proof(tmp_path: Path, capsys) -> None:
    """Every patch's test runs on OpenReg: one that takes the current accelerator and one made by
    instantiate_device_type_tests fail before there and pass after; one that passes before on
    OpenReg is shown as no proof there (and the patch is not proven); one whose patch says
    `OpenReg: not applicable: <why>` is not run there and the column gives the reason."""
    scaler = "torch/amp/grad_scaler.py"
    skip_on_openreg = '        if accelerator is not None and accelerator.type == "openreg":\n'
    skip_on_openreg += "            return\n"
    fail_on_openreg = '        self.assertNotEqual(getattr(accelerator, "type", None), "openreg")\n'
    commits = [
        (subject, {scaler: ("class GradScaler:\n", f"{marker} = True\n\n\nclass GradScaler:\n")},
         {f"test/test_{marker.lower()}.py": _marker_test(marker, body)})
        for subject, marker, body in (
            ("[amp] A marker the current accelerator's test checks", "MARKER_A", ""),
            ("[amp] A marker whose test passes on OpenReg before", "MARKER_B", skip_on_openreg),
            ("[amp] A marker whose test cannot run on OpenReg\n\nIt refuses OpenReg.\n\n"
             "OpenReg: not applicable: the test refuses OpenReg", "MARKER_C", fail_on_openreg),
        )
    ]  # fmt: skip
    commits.append(
        ("[amp] A marker a device-type test checks",
         {scaler: ("class GradScaler:\n", "MARKER_D = True\n\n\nclass GradScaler:\n")},
         {"test/test_marker_d_openreg.py": OPENREG_TEST})
    )  # fmt: skip
    series = series_against_installed_torch(tmp_path, [scaler], commits)
    report_file = tmp_path / "verify.json"
    status = main(["verify", "--series", str(series), "--json", str(report_file),
                   "--openreg", str(OPENREG_PYTHON)])  # fmt: skip
    out, err = capsys.readouterr()
    assert status == 1, out + err
    current, passes_before, not_applicable, device_type = json.loads(report_file.read_text())[
        "patches"
    ]
    (test,) = current["tests"]
    assert test["stock_openreg"]["failing"] == ["FAIL: TestMarker.test_marker"], test
    assert test["patched_openreg"]["outcome"] == "passed", test["patched_openreg"]
    assert current["verdict"] == "proven", current["reasons"]
    (test,) = passes_before["tests"]
    assert test["stock_openreg"]["outcome"] == "passed", test["stock_openreg"]
    assert passes_before["verdict"] == "failed"
    assert any("does not fail before on OpenReg" in r for r in passes_before["reasons"])
    (test,) = not_applicable["tests"]
    assert test["stock_openreg"] is None and test["patched_openreg"] is None
    assert not_applicable["openreg_not_applicable"] == "the test refuses OpenReg"
    assert not_applicable["verdict"] == "proven", not_applicable["reasons"]
    (test,) = device_type["tests"]
    assert test["stock_openreg"]["outcome"] == "failed", test["stock_openreg"]
    assert any("openreg" in name.lower() for name in test["stock_openreg"]["failing"]), test
    assert test["patched_openreg"]["outcome"] == "passed", test["patched_openreg"]
    # Its test runs only on a PrivateUse1 device: no CPU failure, so unproven whatever OpenReg says.
    column = [
        [cell.strip() for cell in line.split("|")][5]
        for line in out.splitlines()
        if line.startswith("| 000")
    ]
    assert column == [
        "fails (1), passes after",
        "no: OK (1 passed, 0 skipped), passes after",
        "not applicable: the test refuses OpenReg",
        "fails (1), passes after",
    ], out
