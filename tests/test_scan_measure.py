"""tools/scan_measure: da-scan's safe --fix measured on a copy, the inputs left untouched."""

from __future__ import annotations

import json
from pathlib import Path

from tools.scan_measure import compile_error, copy_python_files, main

FIXABLE = "import torch\n\nif torch.cuda.is_available():\n    torch.cuda.synchronize()\n"
CLEAN = "import torch\n\nx = torch.zeros(3)\n"


def make_tree(root: Path) -> Path:
    project = root / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "train.py").write_text(FIXABLE)
    (project / "pkg" / "clean.py").write_text(CLEAN)
    (project / "notes.txt").write_text("torch.cuda.synchronize()\n")
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / ".venv" / "lib" / "vendored.py").write_text(FIXABLE)
    return project


def test_copy_keeps_only_python_files_outside_environment_folders(tmp_path: Path) -> None:
    project = make_tree(tmp_path)
    copies = copy_python_files(project, tmp_path / "copy")
    assert sorted(p.relative_to(tmp_path / "copy").as_posix() for p in copies) == [
        "pkg/clean.py",
        "pkg/train.py",
    ]


def test_measure_reports_findings_fixes_and_rewrites_of_a_copy(tmp_path: Path, capsys) -> None:
    project = make_tree(tmp_path)
    out = tmp_path / "measure.json"
    assert main([str(project), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["files"] == 2
    assert set(report["findings_per_rule"]) == {"DA101"}  # the guard and the call: both safe
    assert report["fixes_applied"] == report["findings_per_rule"]["DA101"]
    assert report["files_rewritten"] == ["0-project/pkg/train.py"]
    assert report["remaining_per_rule"] == {}
    assert report["broken_rewrites"] == {} and report["errors"] == []
    assert (project / "pkg" / "train.py").read_text() == FIXABLE, "the input was rewritten"
    assert "rewrites that fail to compile: 0" in capsys.readouterr().out


def test_keep_leaves_the_fixed_copy(tmp_path: Path) -> None:
    project = make_tree(tmp_path)
    keep = tmp_path / "kept"
    assert main([str(project / "pkg" / "train.py"), "--keep", str(keep)]) == 0
    fixed = (keep / "0-train.py" / "train.py").read_text()
    assert "torch.accelerator.synchronize()" in fixed
    assert main([str(project), "--keep", str(keep)]) == 2  # not empty: never mixed


def test_compile_error_names_the_problem_without_running_the_code(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('ran')\ndef f(:\n")
    assert "SyntaxError" in compile_error(broken)
    runs = tmp_path / "runs.py"
    runs.write_text("raise SystemExit('ran')\n")
    assert compile_error(runs) is None


def test_missing_input_is_a_usage_error(tmp_path: Path) -> None:
    assert main([str(tmp_path / "nope")]) == 2
