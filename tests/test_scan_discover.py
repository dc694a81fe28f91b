"""Finding files: exclusions, symlink loops and unreadable paths are reported, never fatal."""

from __future__ import annotations

import os
from pathlib import Path

from device_agnostic.scan.discover import discover, is_excluded
from device_agnostic.scan.engine import SYMLINK_LOOP, UNREADABLE


def make_tree(root: Path) -> None:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("x = 1\n")
    (root / "pkg" / "sub" / "b.py").write_text("y = 2\n")
    (root / "pkg" / "notes.txt").write_text("not python\n")
    (root / ".venv").mkdir()
    (root / ".venv" / "c.py").write_text("z = 3\n")


def names(paths: list[str], root: Path) -> list[str]:
    return sorted(os.path.relpath(p, root) for p in paths)


def test_walks_python_files_and_skips_default_excludes(tmp_path: Path) -> None:
    make_tree(tmp_path)
    found = discover([str(tmp_path)])
    assert names(found.files, tmp_path) == ["pkg/a.py", "pkg/sub/b.py"]
    assert found.errors == []


def test_exclude_patterns_match_names_and_paths(tmp_path: Path) -> None:
    make_tree(tmp_path)
    assert names(discover([str(tmp_path)], ["sub"]).files, tmp_path) == ["pkg/a.py"]
    assert names(discover([str(tmp_path)], ["pkg/sub/*"]).files, tmp_path) == ["pkg/a.py"]
    assert is_excluded("x/y/gen_pb2.py", ["*_pb2.py"])
    assert not is_excluded("x/y/gen.py", ["*_pb2.py"])


def test_explicit_file_is_scanned_even_if_excluded(tmp_path: Path) -> None:
    make_tree(tmp_path)
    target = tmp_path / "pkg" / "a.py"
    assert discover([str(target)], ["a.py"]).files == [str(target)]


def test_symlink_loop_is_reported_and_the_walk_continues(tmp_path: Path) -> None:
    make_tree(tmp_path)
    os.symlink(tmp_path / "pkg", tmp_path / "pkg" / "sub" / "back")
    os.symlink("self.py", tmp_path / "pkg" / "self.py")
    found = discover([str(tmp_path)])
    assert names(found.files, tmp_path) == ["pkg/a.py", "pkg/sub/b.py"]
    assert sorted((Path(e.path).name, e.rule) for e in found.errors) == [
        ("back", SYMLINK_LOOP),
        ("self.py", SYMLINK_LOOP),
    ]
    assert all(e.kind == "error" for e in found.errors)


def test_fifo_and_broken_link_are_unreadable(tmp_path: Path) -> None:
    make_tree(tmp_path)
    os.mkfifo(tmp_path / "pkg" / "pipe.py")
    os.symlink(tmp_path / "missing.py", tmp_path / "pkg" / "dangling.py")
    found = discover([str(tmp_path)])
    assert names(found.files, tmp_path) == ["pkg/a.py", "pkg/sub/b.py"]
    assert sorted((Path(e.path).name, e.rule) for e in found.errors) == [
        ("dangling.py", UNREADABLE),
        ("pipe.py", UNREADABLE),
    ]


def test_missing_path_is_unreadable(tmp_path: Path) -> None:
    found = discover([str(tmp_path / "nope.py")])
    assert found.files == [] and [e.rule for e in found.errors] == [UNREADABLE]


def test_two_routes_to_one_file_scan_it_once(tmp_path: Path) -> None:
    make_tree(tmp_path)
    os.symlink(tmp_path / "pkg" / "sub", tmp_path / "pkg" / "alias")
    found = discover([str(tmp_path), str(tmp_path / "pkg" / "a.py")])
    # b.py is reached through pkg/alias first (names sort), and not again through pkg/sub.
    assert names(found.files, tmp_path) == ["pkg/a.py", "pkg/alias/b.py"]
