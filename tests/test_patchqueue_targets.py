"""The patch queue writes only inside the target it was given: the right folder whatever its
name, never through a link that leaves it; and it refuses what it cannot check (a torch without
a commit, a patch whose hunk header is corrupted)."""

from __future__ import annotations

import os
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
from patchqueue_fixtures import make_installed, make_project, tree_hash

from tools.patchqueue.cli import main
from tools.patchqueue.errors import BadInput
from tools.patchqueue.series import load_series


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    project = make_project(tmp_path)
    return project.series, make_installed(tmp_path, project)


def run(series: Path, *args: str) -> int:
    return main(["--series", str(series), *args])


def test_a_package_folder_not_named_torch_is_patched_itself_not_its_sibling(setup, capsys) -> None:
    series, torch_dir = setup
    copy = torch_dir.with_name("torch-2.13-copy")
    shutil.copytree(torch_dir, copy)
    sibling = tree_hash(torch_dir)
    before = tree_hash(copy)
    assert run(series, "apply", str(copy)) == 0
    assert f"to {copy}" in capsys.readouterr().out
    assert "# patched: default" in (copy / "amp" / "grad_scaler.py").read_text()
    assert tree_hash(torch_dir) == sibling  # the real torch/ next to it is untouched
    assert (copy.parent / ".device_agnostic_patches.torch-2.13-copy" / "state.json").is_file()
    assert not (copy.parent / ".device_agnostic_patches").exists()
    assert run(series, "revert", str(copy)) == 0
    assert tree_hash(copy) == before and tree_hash(torch_dir) == sibling


def test_a_folder_that_is_not_a_torch_package_is_refused(setup, tmp_path, capsys) -> None:
    series, _ = setup
    vision = tmp_path / "torchvision"  # __init__.py and a version.py, but not torch
    vision.mkdir()
    (vision / "__init__.py").write_text("")
    (vision / "version.py").write_text("__version__ = '2.13.0'\ngit_version = 'abc'\n")
    assert run(series, "apply", str(vision)) == 2
    assert "neither a PyTorch git checkout" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_dangling_link_where_a_file_is_added_is_refused(setup, tmp_path, capsys) -> None:
    series, torch_dir = setup
    outside = tmp_path / "outside" / "helper"
    outside.parent.mkdir()
    link = torch_dir / "_device_agnostic"  # the folder 0003 creates
    os.symlink(outside, link)
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 2
    err = capsys.readouterr().err
    assert str(link) in err and "outside the target" in err
    assert not outside.exists() and link.is_symlink()
    assert tree_hash(torch_dir.parent) == before


def test_a_folder_link_leaving_the_target_is_refused(setup, tmp_path, capsys) -> None:
    series, torch_dir = setup
    outside = tmp_path / "elsewhere" / "utils"
    shutil.move(torch_dir / "utils", outside)
    os.symlink(outside, torch_dir / "utils")
    outside_before = tree_hash(outside)
    assert run(series, "apply", str(torch_dir)) == 2
    assert "utils: is a symbolic link" in capsys.readouterr().err
    assert tree_hash(outside) == outside_before


def test_a_file_link_is_never_written_through(setup, tmp_path, capsys) -> None:
    series, torch_dir = setup
    scaler = torch_dir / "amp" / "grad_scaler.py"
    outside = tmp_path / "grad_scaler_outside.py"
    shutil.move(scaler, outside)
    os.symlink(outside, scaler)
    data = outside.read_bytes()
    assert run(series, "apply", str(torch_dir)) == 2
    assert "grad_scaler.py: is a symbolic link" in capsys.readouterr().err
    assert outside.read_bytes() == data and scaler.is_symlink()


def test_a_folder_link_inside_the_target_is_written_through(setup, tmp_path) -> None:
    series, torch_dir = setup
    real = torch_dir / "_utils_real"
    shutil.move(torch_dir / "utils", real)
    os.symlink("_utils_real", torch_dir / "utils")
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 0
    assert "# p2" in (real / "checkpoint.py").read_text()
    assert run(series, "revert", str(torch_dir)) == 0
    assert tree_hash(torch_dir.parent) == before and (torch_dir / "utils").is_symlink()


def test_a_version_without_git_version_is_refused_unless_forced(setup, capsys) -> None:
    series, torch_dir = setup
    (torch_dir / "version.py").write_text("__version__ = '2.13.0+cpu'\n")
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 2
    err = capsys.readouterr().err
    assert "has no git_version" in err and "--force" in err
    assert tree_hash(torch_dir.parent) == before
    assert run(series, "check", str(torch_dir)) == 0
    assert "the commit is not checked" in capsys.readouterr().out
    assert run(series, "apply", "--force", str(torch_dir)) == 0
    assert run(series, "revert", str(torch_dir)) == 0
    assert tree_hash(torch_dir.parent) == before


def _corrupt(series: Path, patch_glob: str, old: str, new: str) -> Path:
    patch = next(series.glob(patch_glob))
    text = patch.read_text()
    assert old in text
    patch.write_text(text.replace(old, new, 1))
    return patch


def test_a_corrupted_hunk_header_of_an_added_file_is_an_error_naming_patch_and_line(
    setup, capsys
) -> None:
    series, torch_dir = setup
    patch = _corrupt(series, "0001-*", "@@ -0,0 +1,2 @@", "@@ -0,0 +1,2 @")
    line = patch.read_text().splitlines().index("@@ -0,0 +1,2 @") + 1
    with pytest.raises(BadInput, match=rf"{patch.name}:{line}: malformed hunk header"):
        load_series(series)
    before = tree_hash(torch_dir.parent)
    assert run(series, "apply", str(torch_dir)) == 2
    assert f"{patch.name}:{line}: malformed hunk header" in capsys.readouterr().err
    assert tree_hash(torch_dir.parent) == before


def test_a_corrupted_second_hunk_header_is_an_error_not_a_lost_hunk(tmp_path) -> None:
    # A real patch of the series with a file of several hunks: unidiff alone drops the hunk
    # under a header it cannot read and parses the rest.
    real = Path(__file__).resolve().parents[1] / "patches"
    shutil.copytree(real, tmp_path / "patches")
    for patch in sorted((tmp_path / "patches").glob("*.patch")):
        lines = patch.read_text().split("\n")
        headers = [i for i, line in enumerate(lines) if line.startswith("@@ ")]
        sections = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
        same_file = [b for a, b in pairwise(headers) if not any(a < s < b for s in sections)]
        if same_file:
            break
    else:  # pragma: no cover - the series always has a multi-hunk file
        pytest.fail("no patch with two hunks in one file")
    number = same_file[0]
    lines[number] = lines[number].replace(" @@", " @", 1)
    patch.write_text("\n".join(lines))
    with pytest.raises(BadInput, match=rf"{patch.name}:{number + 1}: malformed hunk header"):
        load_series(tmp_path / "patches")
