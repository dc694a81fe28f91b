"""The review list (patches/review/*.md) is generated and current, and each kind of staleness
is reported naming the site (tools/review_list.py)."""

from __future__ import annotations

import difflib
import time
from pathlib import Path

import pytest

from tools import review_list
from tools.audit_torch import find_torch

BASE = "# base: torch 2.13.0 cf30153c4c131c8164ee7798e5022d810682e2cb\n"

MODULE = """\
import torch


def pick(x):
    if torch.cuda.is_available():
        return x.to("cuda")
    return x


def helper():
    return 1
"""

AREAS = """\
[areas.demo]
title = "demo"
paths = ["torch/demo/**"]
"""


def _site(line: str, verdict: str, rule: str | None = "DA101", extra: str = "") -> str:
    rule_line = f'rule = "{rule}"\n' if rule else ""
    return (
        f'\n[[site]]\narea = "demo"\nfile = "torch/demo/mod.py"\nline = \'{line}\'\n'
        f"{rule_line}{verdict}\n{extra}"
    )


def _patch(name: str, old: str, new: str) -> str:
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), "a/torch/demo/mod.py", "b/torch/demo/mod.py"
        )
    )
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        "From: Test <test@example.com>\n"
        "Date: Mon, 1 Jan 2024 00:00:00 +0000\n"
        f"Subject: [demo] {name}\n\n---\n"
        "diff --git a/torch/demo/mod.py b/torch/demo/mod.py\n"
        "index 1111111..2222222 100644\n" + diff + "--\n2.40.0\n\n"
    )


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A small installed torch, a series of patches and a decisions file, all in tmp_path."""
    torch_dir = tmp_path / "site" / "torch"
    (torch_dir / "demo").mkdir(parents=True)
    (torch_dir / "demo" / "mod.py").write_text(MODULE)
    series = tmp_path / "patches"
    series.mkdir()
    return {"torch": torch_dir, "series": series, "decisions": tmp_path / "decisions.toml"}


def _run(tree: dict[str, Path], patches: dict[str, str], sites: str) -> list[str]:
    (tree["series"] / "series").write_text(BASE + "".join(f"{n}\n" for n in patches))
    for name, text in patches.items():
        (tree["series"] / name).write_text(text)
    tree["decisions"].write_text(AREAS + sites)
    return review_list.review(tree["decisions"], tree["series"], tree["torch"], None).errors


GUARD = "if torch.cuda.is_available():"
FIX = MODULE.replace(GUARD, "if torch.accelerator.is_available():").replace(
    '"cuda"', "torch.accelerator.current_accelerator()"
)
HELPER = MODULE.replace("return 1", "return 2")
SITES_LEFT = _site(GUARD, 'left = "demo"') + _site(
    'return x.to("cuda")', 'left = "demo"', rule="DA103"
)


@pytest.mark.slow
def test_committed_review_list_is_what_the_generator_writes() -> None:
    start = time.monotonic()
    result = review_list.review(
        review_list.DEFAULT_DECISIONS,
        review_list.DEFAULT_SERIES,
        find_torch(),
        review_list.DEFAULT_CACHE,
    )
    files = review_list.outputs(
        result, review_list.DEFAULT_DECISIONS.parent, review_list.DEFAULT_README
    )
    assert result.errors == []
    stale = [str(p) for p in review_list.stale(files)]
    assert stale == [], "run .venv/bin/python -m tools.review_list --write"
    print(f"review list checked in {time.monotonic() - start:.1f} s")


def test_a_fully_decided_tree_has_no_error(tree: dict[str, Path]) -> None:
    assert _run(tree, {"0001-helper.patch": _patch("helper", MODULE, HELPER)}, SITES_LEFT) == []


def test_a_finding_without_a_decision_is_an_error_naming_it(tree: dict[str, Path]) -> None:
    errors = _run(tree, {}, _site(GUARD, 'left = "demo"'))
    assert len(errors) == 1
    assert "torch/demo/mod.py:6: DA103" in errors[0] and "no decision" in errors[0]


def test_a_decision_whose_line_is_gone_is_an_error(tree: dict[str, Path]) -> None:
    errors = _run(tree, {}, SITES_LEFT + _site("x = gone()", 'left = "demo"', rule=None))
    assert len(errors) == 1
    assert "'x = gone()'" in errors[0] and "no longer exists" in errors[0]


def test_a_decision_for_a_finding_the_scanner_no_longer_reports_is_an_error(
    tree: dict[str, Path],
) -> None:
    errors = _run(tree, {}, SITES_LEFT + _site("return 1", 'left = "demo"'))
    assert len(errors) == 1
    assert "'return 1'" in errors[0] and "no longer reports DA101" in errors[0]


def test_fixed_by_a_patch_not_in_the_series_is_an_error(tree: dict[str, Path]) -> None:
    sites = _site(GUARD, 'fixed = "0009-other.patch"') + _site(
        'return x.to("cuda")', 'left = "demo"', rule="DA103"
    )
    errors = _run(tree, {}, sites)
    assert len(errors) == 1
    assert GUARD in errors[0] and "0009-other.patch, which is not in the series" in errors[0]


def test_fixed_by_a_patch_that_does_not_touch_the_file_is_an_error(
    tree: dict[str, Path],
) -> None:
    other = _patch("other", MODULE, HELPER).replace("torch/demo/mod.py", "torch/demo/other.py")
    (tree["torch"] / "demo" / "other.py").write_text(MODULE)
    sites = _site(GUARD, 'fixed = "0001-other.patch"') + _site(
        'return x.to("cuda")', 'left = "demo"', rule="DA103"
    )
    errors = [e for e in _run(tree, {"0001-other.patch": other}, sites) if "mod.py" in e]
    assert len(errors) == 1
    assert "does not touch torch/demo/mod.py" in errors[0]


def test_fixed_naming_the_wrong_patch_of_the_file_is_an_error(tree: dict[str, Path]) -> None:
    patches = {
        "0001-helper.patch": _patch("helper", MODULE, HELPER),
        "0002-fix.patch": _patch("fix", HELPER, FIX.replace("return 1", "return 2")),
    }
    sites = _site(GUARD, 'fixed = "0001-helper.patch"') + _site(
        'return x.to("cuda")', 'fixed = "0002-fix.patch"', rule="DA103"
    )
    errors = _run(tree, patches, sites)
    assert len(errors) == 1
    assert GUARD in errors[0] and "the patch that changes the line is 0002-fix.patch" in errors[0]


def test_a_left_site_the_series_changes_must_be_reviewed_again(tree: dict[str, Path]) -> None:
    patches = {"0001-fix.patch": _patch("fix", MODULE, FIX)}
    errors = _run(tree, patches, SITES_LEFT)
    assert len(errors) == 2
    assert all("marked left, but 0001-fix.patch changes it" in e for e in errors)
    assert GUARD in errors[0]
    reviewed = SITES_LEFT.replace('left = "demo"', 'left = "demo"\nreviewed = ["0001-fix.patch"]')
    assert _run(tree, patches, reviewed) == []


def test_a_left_guard_whose_body_the_series_rewrites_must_be_reviewed_again(
    tree: dict[str, Path],
) -> None:
    # The condition's line stays; only what it guards changes (as 0021 does).
    body = MODULE.replace('return x.to("cuda")', 'return x.to("cuda", non_blocking=True)')
    sites = _site(GUARD, 'left = "demo"') + _site(
        'return x.to("cuda", non_blocking=True)', 'left = "demo"', rule=None
    )
    errors = _run(tree, {"0001-body.patch": _patch("body", MODULE, body)}, sites)
    assert any(GUARD in e and "marked left, but 0001-body.patch" in e for e in errors)


def test_line_numbers_follow_the_text_not_the_decision(tree: dict[str, Path]) -> None:
    _run(tree, {}, SITES_LEFT)
    (tree["torch"] / "demo" / "mod.py").write_text("# moved\n# down\n" + MODULE)
    result = review_list.review(tree["decisions"], tree["series"], tree["torch"], None)
    assert result.errors == []
    assert [row.lines for row in result.rows] == [[7], [8]]


def _page(tree: dict[str, Path]) -> str:
    result = review_list.review(tree["decisions"], tree["series"], tree["torch"], None)
    assert result.errors == [], result.errors
    ((name, area),) = result.areas.items()
    rows = [r for r in result.rows if r.site.area == name]
    return review_list.render_area(
        area, rows, result.series, review_list.reference_names(name, result.rows)
    )


def test_a_reference_names_the_site_not_a_row_number(tree: dict[str, Path]) -> None:
    """``as @id`` renders as the row the site has now: right after rows renumber."""
    sites = _site('return x.to("cuda")', 'left = "demo"', rule="DA103", extra='id = "to-cuda"')
    sites += _site(GUARD, 'left = "as @to-cuda"')
    _run(tree, {}, sites)
    page = _page(tree)
    # The guard (line 5) sorts before .to("cuda") (line 6): the referenced site is row 2.
    assert "| 1 | torch/demo/mod.py:5 |" in page and "left: as #2 |" in page
    # A new finding above both renumbers the rows; the reference follows its site.
    (tree["torch"] / "demo" / "mod.py").write_text(
        MODULE.replace("def pick(x):\n", "def pick(x):\n    torch.cuda.synchronize()\n")
    )
    tree["decisions"].write_text(AREAS + _site("torch.cuda.synchronize()", 'left = "demo"') + sites)
    page = _page(tree)
    assert "left: as #3 |" in page


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("as @nowhere", "refers to @nowhere, which no site has as its id (a dangling reference)"),
        ("as 2", "refers to a row by its number ('as 2')"),
        ("same as 1/2", "refers to a row by its number ('same as 1/2')"),
    ],
)
def test_a_dangling_or_numbered_reference_is_an_error(tree, reason, message) -> None:
    sites = _site('return x.to("cuda")', 'left = "demo"', rule="DA103", extra='id = "to-cuda"')
    errors = _run(tree, {}, sites + _site(GUARD, f'left = "{reason}"'))
    assert len(errors) == 1 and message in errors[0], errors
