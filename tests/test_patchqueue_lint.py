"""``scripts/patches lint``: the files a series patches or adds are held to PyTorch's own ruff
settings: a new diagnostic or an unformatted new file fails, what upstream's file already had
does not, and the real series is clean."""

from __future__ import annotations

from pathlib import Path

from patchqueue_fixtures import REAL_TORCH, series_against_installed_torch

from tools.patchqueue.cli import main
from tools.patchqueue.lint import lint_series
from tools.patchqueue.series import load_series
from tools.patchqueue.targets import InstalledTorch

FORMATTED_TEST = """\
# Owner(s): ["module: amp"]

import torch
from torch.testing._internal.common_utils import run_tests, TestCase


class TestScale(TestCase):
    def test_scale(self):
        self.assertEqual(torch.ones(2).sum().item(), 2.0)


if __name__ == "__main__":
    run_tests()
"""


def make_series(tmp: Path, edits: dict[str, tuple[str, str]], added: dict[str, str]) -> Path:
    """One patch against the installed torch's files: ``edits`` maps a torch path to (old, new)
    text, ``added`` a test path to its content."""
    return series_against_installed_torch(tmp, list(edits), [("[amp] A change", edits, added)])


def lint_of(series: Path) -> dict[str, object]:
    (files,) = lint_series(load_series(series), InstalledTorch(REAL_TORCH)).values()
    return {f.path: f for f in files}


def test_a_clean_change_and_a_formatted_test_pass(tmp_path: Path) -> None:
    series = make_series(
        tmp_path,
        {"torch/amp/grad_scaler.py": ("class GradScaler:\n", "class GradScaler:  # note\n")},
        {"test/test_amp_scale.py": FORMATTED_TEST},
    )
    results = lint_of(series)
    assert all(r.clean for r in results.values()), [r.describe() for r in results.values()]
    assert results["torch/amp/grad_scaler.py"].formatted_before is True
    assert results["test/test_amp_scale.py"].added


def test_an_unformatted_test_and_a_new_diagnostic_fail(tmp_path: Path, capsys) -> None:
    series = make_series(
        tmp_path,
        # An unused import (F401) the stock file does not have.
        {"torch/amp/grad_scaler.py": ("import inspect\n", "import inspect\nimport shlex\n")},
        # Single quotes and a 100-column line: upstream's ruff format rewrites both.
        {"test/test_amp_scale.py": FORMATTED_TEST.replace('"__main__"', "'__main__'")},
    )
    results = lint_of(series)
    scaler = results["torch/amp/grad_scaler.py"]
    assert not scaler.clean
    assert any(d.startswith("F401") and "shlex" in d for d in scaler.new_diagnostics)
    test = results["test/test_amp_scale.py"]
    assert not test.clean and not test.formatted
    assert "not ruff-formatted" in test.describe()
    assert main(["lint", "--series", str(series)]) == 1
    out = capsys.readouterr().out
    assert "0/2 files clean" in out and "F401" in out


def test_what_the_stock_file_already_had_is_not_blamed(tmp_path: Path) -> None:
    # checkpoint.py is not ruff-formatted upstream: a clean one-line change keeps it so and
    # passes; the line moves do not count as new diagnostics.
    series = make_series(
        tmp_path,
        {
            "torch/utils/checkpoint.py": (
                "import contextlib\n",
                "import contextlib\n\n\n# A comment that moves every line below.\n",
            )
        },
        {},
    )
    (result,) = lint_of(series).values()
    assert result.formatted_before is False
    assert result.clean, result.describe()
    assert "as upstream's file was not" in result.describe()


def test_the_real_series_is_lint_clean(capsys) -> None:
    status = main(["lint"])
    out = capsys.readouterr().out
    assert status == 0, out
