"""``scripts/patches lint``: the files a series patches or adds are held to PyTorch's own ruff
settings: a new diagnostic or an unformatted new file fails, what upstream's file already had
does not, and the real series is clean."""

from __future__ import annotations

import subprocess
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
    assert "test/test_amp_scale.py:12: PYFMT" in test.describe()
    assert 'write if __name__ == "__main__":' in test.describe()
    assert main(["lint", "--series", str(series)]) == 1
    out = capsys.readouterr().out
    assert "0/2 files clean" in out and "F401" in out
    # The diagnostic says where: the added import's line.
    assert any(f.code == "F401" and f.line > 1 for f in scaler.findings)


def test_what_the_stock_file_already_had_is_not_blamed(tmp_path: Path) -> None:
    # checkpoint.py is not ruff-formatted upstream: a clean one-line change keeps it so and
    # passes; the line moves do not count as new diagnostics.
    series = make_series(
        tmp_path,
        {
            "torch/utils/checkpoint.py": (
                "import contextlib\n",
                "import contextlib\n\n# A comment that moves every line below.\n",
            )
        },
        {},
    )
    (result,) = lint_of(series).values()
    assert result.formatted_before is False
    assert result.clean, result.describe()


def test_usort_joins_a_wrapped_one_name_import(tmp_path: Path) -> None:
    # PYFMT runs usort before ruff format: usort joins a one-name import that ruff format
    # alone leaves wrapped (and orders the names of an import).
    wrapped = FORMATTED_TEST.replace(
        "import torch\n",
        "import torch\nfrom torch.testing._internal.common_device_type import (\n"
        "    instantiate_device_type_tests,\n)\n",
    ).replace("if __name__", "instantiate_device_type_tests(TestScale, globals())\n\n\nif __name__")
    series = make_series(tmp_path, {}, {"test/test_amp_scale.py": wrapped})
    (result,) = lint_of(series).values()
    (finding,) = result.findings
    assert (finding.path, finding.line, finding.code) == ("test/test_amp_scale.py", 4, "PYFMT")
    assert "rewrite lines 4-6" in finding.message
    assert "import instantiate_device_type_tests" in finding.fix


def test_a_new_unformatted_line_counts_in_an_unformatted_file(tmp_path: Path) -> None:
    # checkpoint.py is not PYFMT-clean upstream; a line the patch adds is still held to PYFMT
    # (a 92-column line that ruff format wraps), and only that line is blamed.
    long_call = f'    _unused = ("{"a" * 40}", "{"b" * 30}")\n'
    assert len(long_call.rstrip()) == 92
    series = make_series(
        tmp_path,
        {
            "torch/utils/checkpoint.py": (
                "def detach_variable(inputs: Tuple[Any, ...]) -> Tuple[torch.Tensor, ...]:\n",
                "def detach_variable(inputs: Tuple[Any, ...]) -> Tuple[torch.Tensor, ...]:\n"
                + long_call,
            )
        },
        {},
    )
    (result,) = lint_of(series).values()
    assert result.formatted_before is False
    (finding,) = result.findings
    assert finding.code == "PYFMT" and "columns" in finding.message, result.describe()
    line = (
        (REAL_TORCH / "utils" / "checkpoint.py")
        .read_text()
        .splitlines()
        .index("def detach_variable(inputs: Tuple[Any, ...]) -> Tuple[torch.Tensor, ...]:")
    )
    assert finding.line == line + 2


def test_the_real_series_is_lint_clean(capsys) -> None:
    status = main(["lint"])
    out = capsys.readouterr().out
    assert status == 0, out


def test_lint_with_a_checkout_lints_the_folded_suites(tmp_path: Path, capsys) -> None:
    """``lint --pytorch CHECKOUT``: each test folded into its Upstream-Test suite as export
    folds it, and the folded suite linted (here a 130-column line the test brings along)."""
    long_line = '        self.assertTrue("' + "x" * 100 + '")\n'
    test = FORMATTED_TEST.replace(
        "        self.assertEqual(torch.ones(2).sum().item(), 2.0)\n", long_line
    ).replace("class TestScale", "class TestScaleLong")
    series = make_series(tmp_path, {}, {"test/test_amp_scale.py": test})
    patch = next(series.glob("0001-*.patch"))
    head, sep, rest = patch.read_text().partition("\n---\n")
    patch.write_text(head + "\n\nUpstream-Test: test/test_amp.py" + sep + rest)
    repo = tmp_path / "pytorch"
    (repo / "torch").mkdir(exist_ok=True)
    (repo / "torch" / "__init__.py").write_text("")
    (repo / "test").mkdir(exist_ok=True)
    (repo / "test" / "test_amp.py").write_text(FORMATTED_TEST)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "suites"], check=True)
    args = ["lint", "--series", str(series), "--pytorch", str(repo), "--base", "HEAD"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "folded suite: test/test_amp.py:14: PYFMT" in out and "127 columns" in out, out
    assert "folded suites: 1 findings" in out
