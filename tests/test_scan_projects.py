"""Real CUDA-first training code through ``da-scan --fix``: the expected rewrite, and the
rewritten code running on neuron with the results the original gives on the CPU.

See tests/scan_projects/README.md for what each project exercises.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PROJECTS = Path(__file__).parent / "scan_projects"
DA_SCAN = [sys.executable, "-m", "device_agnostic.scan"]

# project -> (fix flags, how its train.py writes the result file)
CASES: dict[str, tuple[list[str], list[str]]] = {
    "classifier": (["--fix"], ["--out", "{out}"]),
    "seq_regression": (["--fix", "--unsafe-fixes"], ["{out}"]),
    "amp_loop": (["--fix", "--unsafe-fixes"], ["--out", "{out}"]),
}


def python_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.py"))


def copy_project(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "project"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@pytest.mark.parametrize("name", sorted(CASES))
def test_fix_turns_before_into_after_and_is_idempotent(name: str, tmp_path: Path) -> None:
    flags, _ = CASES[name]
    project = copy_project(PROJECTS / name / "before", tmp_path)
    first = subprocess.run(
        [*DA_SCAN, *flags, str(project)], capture_output=True, text=True, timeout=120
    )
    assert first.returncode in (0, 1), first.stderr  # 1: review findings left to a person
    assert "Fixed " in first.stdout, first.stdout
    expected = PROJECTS / name / "after"
    assert python_files(project) == python_files(expected)
    for file_name in python_files(expected):
        assert (project / file_name).read_text() == (expected / file_name).read_text(), (
            f"{name}/{file_name}: da-scan {' '.join(flags)} differs from after/{file_name}"
        )
    snapshot = {p: p.read_bytes() for p in project.glob("*.py")}
    second = subprocess.run(
        [*DA_SCAN, *flags, str(project)], capture_output=True, text=True, timeout=120
    )
    assert "Fixed 0 findings in 0 files" in second.stdout, second.stdout
    assert {p: p.read_bytes() for p in project.glob("*.py")} == snapshot


def run_training(folder: Path, name: str, tmp_path: Path, label: str, accelerator: bool) -> dict:
    """Run ``folder/train.py`` in a fresh interpreter; without ``accelerator`` torch does not
    load the neuron backend, as on a machine with no accelerator at all."""
    _, argv = CASES[name]
    out = tmp_path / f"{label}.json"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if accelerator else "0")
    args = [arg.format(out=out) for arg in argv]
    completed = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, f"{label} run of {name} failed:\n{completed.stderr[-3000:]}"
    return json.loads(out.read_text())


def assert_same_training(got: dict, want: dict, what: str) -> None:
    assert len(got["losses"]) == len(want["losses"]), what
    torch.testing.assert_close(
        torch.tensor(got["losses"]), torch.tensor(want["losses"]), msg=f"{what}: losses differ"
    )
    for index, (a, b) in enumerate(zip(got["weights"], want["weights"], strict=True)):
        torch.testing.assert_close(
            torch.tensor(a), torch.tensor(b), msg=f"{what}: parameter {index} differs"
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_fixed_project_runs_on_neuron_like_the_original_on_cpu(name: str, tmp_path: Path) -> None:
    before = copy_project(PROJECTS / name / "before", tmp_path / "before")
    after = copy_project(PROJECTS / name / "after", tmp_path / "after")
    original = run_training(before, name, tmp_path, "original-cpu", accelerator=False)
    assert original["device"] == "cpu"
    fixed = run_training(after, name, tmp_path, "fixed-neuron", accelerator=True)
    assert fixed["device"] == "neuron", "the fixed code did not use the current accelerator"
    assert_same_training(fixed, original, f"{name}: fixed code on neuron vs original on cpu")
    # Users without an accelerator keep working code.
    fixed_cpu = run_training(after, name, tmp_path, "fixed-cpu", accelerator=False)
    assert fixed_cpu["device"] == "cpu"
    assert_same_training(fixed_cpu, original, f"{name}: fixed code on cpu vs original on cpu")


def test_original_code_ignores_neuron(tmp_path: Path) -> None:
    # The point of the fix: CUDA-first code silently falls back to the CPU on neuron.
    before = copy_project(PROJECTS / "classifier" / "before", tmp_path)
    original = run_training(before, "classifier", tmp_path, "original-neuron", accelerator=True)
    assert original["device"] == "cpu"


def test_after_folders_are_what_the_fixer_leaves_untouched_elsewhere() -> None:
    # after/ holds only the files of before/ (no stray outputs), rewritten or identical.
    for name in CASES:
        before, after = PROJECTS / name / "before", PROJECTS / name / "after"
        assert python_files(before) == python_files(after), name
        changed = [f for f in python_files(before) if not filecmp.cmp(before / f, after / f)]
        assert changed, f"{name}: the fixer changed nothing"
