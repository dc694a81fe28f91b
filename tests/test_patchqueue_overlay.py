"""The patch queue on an installed torch: check, apply, status, revert, and every failure path
leaving the target byte-exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patchqueue_fixtures import format_series, git, make_installed, make_project, tree_hash

from tools.patchqueue.cli import main


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    project = make_project(tmp_path)
    return project.series, make_installed(tmp_path, project)


def run(series: Path, *args: str) -> int:
    return main(["--series", str(series), *args])


def test_check_reports_every_patch_applies_and_changes_nothing(setup, capsys) -> None:
    series, torch_dir = setup
    before = tree_hash(torch_dir.parent)
    assert run(series, "check", str(torch_dir)) == 0
    out = capsys.readouterr().out
    assert out.count(": applies") == 3 and "test/" not in out.split("skipped")[0]
    assert tree_hash(torch_dir.parent) == before


def test_apply_then_revert_restores_the_installed_torch_byte_for_byte(setup, capsys) -> None:
    series, torch_dir = setup
    site = torch_dir.parent
    before = tree_hash(site)
    assert run(series, "apply", str(torch_dir)) == 0
    scaler = (torch_dir / "amp" / "grad_scaler.py").read_text()
    assert scaler.count("# patched: default") == 1 and "class GradScaler:  # p3" in scaler
    assert (torch_dir / "_device_agnostic" / "__init__.py").read_text() == "HELPER = 1\n"
    tests = site / ".device_agnostic_patches" / "tests" / "test_amp_default.py"
    assert tests.is_file()
    state = json.loads((site / ".device_agnostic_patches" / "state.json").read_text())
    assert [p["name"] for p in state["series"]] == sorted(p.name for p in series.glob("*.patch"))
    capsys.readouterr()
    assert run(series, "status", str(torch_dir)) == 0
    assert capsys.readouterr().out.count(": applied") == 3
    assert run(series, "revert", str(torch_dir)) == 0
    assert tree_hash(site) == before


def test_applying_twice_does_nothing_and_never_doubles_a_hunk(setup, capsys) -> None:
    series, torch_dir = setup
    assert run(series, "apply", str(torch_dir)) == 0
    once = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert tree_hash(torch_dir.parent) == once
    capsys.readouterr()
    assert run(series, "check", str(torch_dir)) == 0
    assert capsys.readouterr().out.count(": already applied") == 3


def test_conflict_names_patch_file_and_hunk_and_leaves_target_untouched(setup, capsys) -> None:
    series, torch_dir = setup
    scaler = torch_dir / "amp" / "grad_scaler.py"
    scaler.write_text(scaler.read_text().replace("class GradScaler:\n", "class Scaler:\n"))
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 1
    err = capsys.readouterr().err
    assert "0003-amp-Add-a-helper.patch: conflicts" in err
    assert "torch/amp/grad_scaler.py hunk 1 (@@ -50," in err and "class GradScaler:" in err
    assert tree_hash(torch_dir.parent) == before
    assert run(series, "check", str(torch_dir)) == 1


def test_hunk_moved_by_exact_offset_applies_and_reports_the_offset(setup, capsys) -> None:
    series, torch_dir = setup
    site = torch_dir.parent
    checkpoint = torch_dir / "utils" / "checkpoint.py"
    checkpoint.write_text("# one\n# two\n" + checkpoint.read_text())
    before = tree_hash(site)
    assert run(series, "apply", str(torch_dir)) == 0
    assert "torch/utils/checkpoint.py hunk 1 at offset +2 lines" in capsys.readouterr().out
    assert "import contextlib  # p2\n" in checkpoint.read_text()
    assert run(series, "revert", str(torch_dir)) == 0
    assert tree_hash(site) == before


def test_context_found_at_several_places_is_a_conflict_not_a_guess(tmp_path, capsys) -> None:
    project = make_project(tmp_path)
    torch_dir = make_installed(tmp_path, project)
    checkpoint = torch_dir / "utils" / "checkpoint.py"
    lines = checkpoint.read_text().splitlines(keepends=True)
    # The hunk's lines moved (so not at the stated line) and occur twice: refuse.
    checkpoint.write_text("".join(["# x\n", *lines[:10], "# y\n", *lines[:10], *lines[10:]]))
    before = tree_hash(torch_dir.parent)
    assert run(project.series, "apply", str(torch_dir)) == 1
    assert "several places" in capsys.readouterr().err
    assert tree_hash(torch_dir.parent) == before


def test_wrong_torch_version_is_bad_input_and_changes_nothing(tmp_path, capsys) -> None:
    project = make_project(tmp_path)
    torch_dir = make_installed(tmp_path, project, version="2.14.1")
    before = tree_hash(torch_dir.parent)
    assert run(project.series, "apply", str(torch_dir)) == 2
    assert "torch 2.14.1" in capsys.readouterr().err
    assert run(project.series, "check", str(torch_dir)) == 2
    assert tree_hash(torch_dir.parent) == before


def test_truncated_hunk_is_bad_input_naming_patch_and_file(setup, capsys) -> None:
    series, torch_dir = setup
    patch = next(series.glob("0002-*.patch"))
    patch.write_text(patch.read_text().rstrip("\n").rsplit("\n", 2)[0] + "\n")
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 2
    err = capsys.readouterr().err
    assert patch.name in err and "torch/utils/checkpoint.py" in err and "shorter" in err
    assert tree_hash(torch_dir.parent) == before


def test_patch_missing_from_disk_is_bad_input(setup, capsys) -> None:
    series, torch_dir = setup
    next(series.glob("0002-*.patch")).unlink()
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 2
    assert "0002-" in capsys.readouterr().err
    assert tree_hash(torch_dir.parent) == before


def test_series_without_base_is_bad_input(setup, capsys) -> None:
    series, torch_dir = setup
    text = (series / "series").read_text()
    (series / "series").write_text("\n".join(x for x in text.splitlines() if "base:" not in x))
    assert run(series, "check", str(torch_dir)) == 2
    assert "no base recorded" in capsys.readouterr().err


def test_revert_refuses_a_file_changed_since_apply_unless_forced(setup, capsys) -> None:
    series, torch_dir = setup
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 0
    scaler = torch_dir / "amp" / "grad_scaler.py"
    scaler.write_text(scaler.read_text() + "# local edit\n")
    assert run(series, "revert", str(torch_dir)) == 2
    assert "grad_scaler.py" in capsys.readouterr().err
    assert run(series, "revert", "--force", str(torch_dir)) == 0
    assert tree_hash(torch_dir.parent) == before


def test_tests_dir_option_receives_the_added_test_files(setup, tmp_path) -> None:
    series, torch_dir = setup
    tests_dir = tmp_path / "upstream-tests"
    assert run(series, "apply", str(torch_dir), "--tests-dir", str(tests_dir)) == 0
    assert (tests_dir / "test_amp_default.py").is_file()
    assert run(series, "revert", str(torch_dir)) == 0
    assert not tests_dir.exists()


def test_a_stack_whose_later_patch_holds_an_earlier_ones_lines_checks_as_applied(
    tmp_path, capsys
) -> None:
    # The second patch edits the line after the first one's, so its context holds the first
    # one's added line: on the applied tree the first one's reverse applies only once the second
    # is taken off (found in the real series: 0028's context holds 0025's lines).
    project = make_project(tmp_path)
    repo = project.repo
    git(repo, "checkout", "-q", "-b", "stack", project.base)
    checkpoint = repo / "torch" / "utils" / "checkpoint.py"
    lines = checkpoint.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line == "import contextlib\n")
    for index, subject in ((first, "[checkpoint] A"), (first + 1, "[checkpoint] B")):
        lines[index] = lines[index].rstrip("\n") + f"  # {subject[-1]}\n"
        checkpoint.write_text("".join(lines))
        git(repo, "commit", "-q", "-am", subject)
    series = format_series(
        repo, project.base, tmp_path / "stack", f"# base: torch 2.13.0 {project.base}"
    )
    git(repo, "checkout", "-q", "main")
    torch_dir = make_installed(tmp_path, project)
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 0
    capsys.readouterr()
    assert run(series, "check", str(torch_dir)) == 0
    assert capsys.readouterr().out.count(": already applied") == 2
    assert run(series, "apply", str(torch_dir)) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert run(series, "revert", str(torch_dir)) == 0
    assert tree_hash(torch_dir.parent) == before


def test_a_hunk_appending_to_a_file_is_recognised_as_applied_not_applied_again(
    tmp_path, capsys
) -> None:
    # A hunk without trailing context must match at the end of the file (as git apply): its
    # leading context is still present after its own added lines, so without the anchor a tree
    # that already has the change would take it a second time (0000 appends to torch/_utils.py).
    project = make_project(tmp_path)
    repo = project.repo
    git(repo, "checkout", "-q", "-b", "append", project.base)
    checkpoint = repo / "torch" / "utils" / "checkpoint.py"
    checkpoint.write_text(checkpoint.read_text() + "\n\ndef _appended():\n    return 1\n")
    git(repo, "commit", "-q", "-am", "[checkpoint] Append a helper")
    series = format_series(
        repo, project.base, tmp_path / "append", f"# base: torch 2.13.0 {project.base}"
    )
    torch_dir = make_installed(tmp_path, project)  # the checkout still has the change
    before = tree_hash(torch_dir.parent)
    assert run(series, "check", str(torch_dir)) == 0
    assert ": already applied" in capsys.readouterr().out
    assert run(series, "apply", str(torch_dir)) == 1  # not the queue's to apply: nothing changes
    assert tree_hash(torch_dir.parent) == before
    assert (torch_dir / "utils" / "checkpoint.py").read_text().count("def _appended") == 1
