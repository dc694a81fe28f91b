"""Folding a patch's standalone test into the upstream suite it names (``Upstream-Test:``): the
suite gains the test's classes before its ``__main__`` block and only the imports it lacks, runs
both, and export's commit carries a hunk of the suite instead of a new file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from patchqueue_fixtures import UPSTREAM_SUITE, git, make_project

from tools.patchqueue.cli import main
from tools.patchqueue.errors import BadInput
from tools.patchqueue.fold import Fold, fold_test, folds
from tools.patchqueue.pyfmt import format_texts

NEW_TEST = '''\
# Owner(s): ["module: amp"]

"""The default device of GradScaler (explained in the commit message)."""

import unittest
from unittest import mock

import torch


def _double(x):
    return 2 * x


# A mock of the trait the test needs.
class TestAmpDefaultMock(unittest.TestCase):
    @mock.patch.object(torch, "ones", torch.zeros)
    def test_mocked(self):
        self.assertEqual(_double(torch.ones(2)).sum().item(), 0.0)


if __name__ == "__main__":
    unittest.main()
'''


def test_a_folded_suite_runs_its_tests_and_the_new_ones(tmp_path: Path) -> None:
    folded = fold_test(NEW_TEST, UPSTREAM_SUITE, "test/test_amp_default.py", "test/test_amp.py")
    # Only the missing import is added, after the suite's own; docstring and owner dropped.
    assert folded.count("import unittest\n") == 1 and folded.count("import torch\n") == 1
    assert "from unittest import mock\n" in folded
    assert folded.index("from unittest import mock") < folded.index("class TestAmp(")
    assert "explained in the commit message" not in folded
    assert folded.count("# Owner(s)") == 1
    assert "# A mock of the trait the test needs.\nclass TestAmpDefaultMock" in folded
    body, main_block = folded.split('if __name__ == "__main__":')
    assert "class TestAmpDefaultMock" in body and "def _double" in body
    assert "\n\n\n# A mock of the trait" in body and body.endswith("\n\n\n")
    suite = tmp_path / "test_amp.py"
    suite.write_text(folded)
    run = subprocess.run(
        [sys.executable, str(suite), "-v"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert "test_ones" in run.stderr and "test_mocked" in run.stderr
    assert "Ran 2 tests" in run.stderr


@pytest.mark.parametrize(
    ("new", "suite", "message"),
    [
        (NEW_TEST.replace("TestAmpDefaultMock", "TestAmp"), UPSTREAM_SUITE, "already has"),
        (NEW_TEST.replace("from unittest import mock", "from os import path as torch"),
         UPSTREAM_SUITE, "would rebind"),
        (NEW_TEST, UPSTREAM_SUITE.split("\n\nif __name__")[0] + "\n", "no `if __name__"),
        (NEW_TEST + "def (:\n", UPSTREAM_SUITE, "does not parse"),
    ],
)  # fmt: skip
def test_a_fold_that_cannot_be_made_cleanly_is_refused(new, suite, message) -> None:
    with pytest.raises(BadInput, match=message):
        fold_test(new, suite, "test/test_amp_default.py", "test/test_amp.py")


def test_the_trailer_names_a_suite_for_each_added_test() -> None:
    assert folds("test/test_amp.py", ["test/test_a.py"]) == [
        Fold("test/test_a.py", "test/test_amp.py")
    ]
    pairs = "test/test_a.py -> test/test_amp.py, test/test_b.py -> test/profiler/test_profiler.py"
    assert folds(pairs, ["test/test_a.py", "test/test_b.py"])[1].suite.endswith("profiler.py")
    with pytest.raises(BadInput, match="adds 2 test files"):
        folds("test/test_amp.py", ["test/test_a.py", "test/test_b.py"])
    with pytest.raises(BadInput, match="is not a test file the patch adds"):
        folds("test/test_c.py -> test/test_amp.py", ["test/test_a.py"])


def test_export_folds_the_test_into_the_suite(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    first = sorted(project.series.glob("0001-*.patch"))[0]
    text = first.read_text()
    head, sep, rest = text.partition("\n---\n")
    # The fixture's test file gets a main block, its message a test plan and the trailer.
    rest = rest.replace(
        "+def test_default():\n+    assert True\n",
        "".join("+" + line for line in NEW_TEST.splitlines(keepends=True)),
    ).replace("@@ -0,0 +1,2 @@", f"@@ -0,0 +1,{len(NEW_TEST.splitlines())} @@")
    head += "\n\nTest plan: python test/test_amp_default.py\n\nUpstream-Test: test/test_amp.py"
    first.write_text(head + sep + rest)
    out = tmp_path / "out"
    args = ["--series", str(project.series), "export", "--pytorch", str(project.repo)]
    assert main([*args, "--out", str(out)]) == 0
    branch = f"device-agnostic/{first.stem}"
    changed = git(project.repo, "show", "--name-status", "--format=", branch).split("\n")
    assert "M\ttest/test_amp.py" in changed and "test/test_amp_default.py" not in "\n".join(changed)
    suite = git(project.repo, "show", f"{branch}:test/test_amp.py")
    assert "class TestAmpDefaultMock" in suite and "class TestAmp(" in suite
    message = git(project.repo, "log", "-1", "--format=%B", branch)
    assert "python test/test_amp.py" in message and "test_amp_default" not in message
    body = (out / first.stem / "body.md").read_text()
    assert "python test/test_amp.py" in body


# The shape of a real distributed suite (test_fsdp_sharded_grad_scaler.py): a module imported as
# `from a import b as c` where the new test writes `import a.b as c`, a guard both files have,
# and a parenthesised import from a long module path that the suite lacks.
DIST_SUITE = """\
# Owner(s): ["oncall: distributed"]

import os
import sys
import unittest
from os import path as osp

if not osp.sep:
    print("no separator, skipping tests", file=sys.stderr)
    sys.exit(0)


class TestPaths(unittest.TestCase):
    def test_join(self):
        self.assertEqual(osp.join("a", "b"), "a" + osp.sep + "b")


if __name__ == "__main__":
    unittest.main()
"""

DIST_NEW = """\
# Owner(s): ["oncall: distributed"]

import os.path
import os.path as osp
import sys
import unittest
from concurrent.futures.process import (
    BrokenProcessPool as BrokenPool,
    ProcessPoolExecutor as PoolExecutor,
)

if not osp.sep:
    print("no separator, skipping tests", file=sys.stderr)
    sys.exit(0)


class TestPathsMore(unittest.TestCase):
    def test_names(self):
        self.assertTrue(os.path.isabs(osp.sep))
        self.assertTrue(issubclass(BrokenPool, Exception) and PoolExecutor)


if __name__ == "__main__":
    unittest.main()
"""


def test_a_fold_into_a_real_suite_shape_needs_no_rename_and_stays_formatted(tmp_path: Path) -> None:
    folded = fold_test(DIST_NEW, DIST_SUITE, "test/test_paths_more.py", "test/test_paths.py")
    # `import os.path as osp` binds what `from os import path as osp` binds: no clash, not added;
    # `import os.path` (binds `os`, which the suite's `import os` binds too) loads a module the
    # suite does not import by name, so it is added.
    assert "import os.path as osp" not in folded and "\nimport os.path\n" in folded
    assert folded.count("if not osp.sep:") == 1
    # The merged import is wrapped the way ruff format writes it (it is over 88 columns).
    wrapped = "from concurrent.futures.process import (\n    BrokenProcessPool as BrokenPool,\n"
    assert wrapped in folded
    suite = tmp_path / "test_paths.py"
    suite.write_text(folded)
    ruff = Path(sys.executable).parent / "ruff"
    config = Path(__file__).parents[1] / "tools" / "patchqueue" / "pytorch_ruff.toml"
    fmt = subprocess.run(
        [str(ruff), "format", "--check", "--config", str(config), str(suite)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    run = subprocess.run(
        [sys.executable, str(suite), "-v"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "Ran 2 tests" in run.stderr, run.stderr


def test_imports_only_the_dropped_main_block_used_are_not_added() -> None:
    new = NEW_TEST.replace(
        "import torch\n",
        "import torch\nfrom torch.testing._internal.common_utils import run_tests\n",
    ).replace("    unittest.main()\n", "    run_tests()\n")
    folded = fold_test(new, UPSTREAM_SUITE, "test/test_amp_default.py", "test/test_amp.py")
    assert "run_tests" not in folded  # it would be an unused import (F401) in the suite
    assert "from unittest import mock\n" in folded  # the folded class uses this one


def test_the_real_tests_that_share_a_suite_fold_into_it_together() -> None:
    """0009/0010/0011 (test_data_parallel.py), 0001/0004/0005 (test_torch.py), ...: stacked in one
    suite, as upstream will have them once all land, no name of one clashes with another."""
    from tools.patchqueue.export import suite_folds
    from tools.patchqueue.series import load_series

    series = load_series(Path(__file__).resolve().parents[1] / "patches")
    suites: dict[str, str] = {}
    shared = 0
    for patch in series.patches:
        for fold in suite_folds(patch):
            (added,) = [f for f in patch.files if f.path == fold.new]
            source = "".join(added.hunks[0].new)  # a new file: one hunk, all of it
            shared += fold.suite in suites
            suites[fold.suite] = fold_test(
                source, suites.get(fold.suite, UPSTREAM_SUITE), fold.new, fold.suite
            )
    assert shared >= 5


SUITE_WITH_IMPORT_BLOCK = """\
# Owner(s): ["module: tests"]

import unittest

from torch.testing._internal.common_utils import (
    IS_JETSON,
    run_tests,
    TestCase,
)
from torch.utils.dlpack import from_dlpack  # the protocol under test


class TestSuite(TestCase):
    def test_jetson(self):
        self.assertIsInstance(IS_JETSON, bool)


if __name__ == "__main__":
    run_tests()
"""

NEW_WITH_IMPORTS = """\
from torch.testing._internal.common_utils import parametrize, TestCase
from torch.utils.dlpack import to_dlpack


class TestNew(TestCase):
    @parametrize("x", [1])
    def test_new(self, x):
        self.assertTrue(to_dlpack)
"""


def test_new_names_join_the_suites_own_import_in_usorts_order() -> None:
    folded = fold_test(NEW_WITH_IMPORTS, SUITE_WITH_IMPORT_BLOCK, "test/a.py", "test/b.py")
    # Into the existing block, case-insensitively sorted as usort keeps PyTorch's imports.
    assert (
        "from torch.testing._internal.common_utils import (\n"
        "    IS_JETSON,\n    parametrize,\n    run_tests,\n    TestCase,\n)\n"
    ) in folded
    # A statement holding a comment is not rewritten (the comment would be lost): a new line.
    assert "from torch.utils.dlpack import from_dlpack  # the protocol under test\n" in folded
    assert "from torch.utils.dlpack import to_dlpack\n" in folded
    assert folded.count("import (") == 1


SUITE_WITH_A_MODULE_LEVEL_NAME = """\
import functools

import torch
from torch.profiler import record_function
from torch.testing._internal.common_utils import run_tests, TestCase


profile = functools.partial(torch.profiler.profile, record_shapes=True)


class TestSuite(TestCase):
    def test_profile(self):
        with profile(), record_function("x"):
            pass


if __name__ == "__main__":
    run_tests()
"""

NEW_IMPORTING_THAT_NAME = """\
import torch
from torch.profiler import profile
from torch.testing._internal.common_utils import TestCase


class TestNew(TestCase):
    def test_new(self):
        with profile():
            torch.ones(1)
"""


def test_a_name_joining_the_suites_own_import_may_not_rebind_a_suite_name() -> None:
    # ``profile`` would join the suite's ``from torch.profiler import record_function``, above
    # the suite's own ``profile = ...``: F811, and the new code would get the suite's profile.
    with pytest.raises(BadInput, match=r"'from torch.profiler import profile' would rebind"):
        fold_test(NEW_IMPORTING_THAT_NAME, SUITE_WITH_A_MODULE_LEVEL_NAME, "test/a.py", "test/b.py")
    renamed = NEW_IMPORTING_THAT_NAME.replace(
        "from torch.profiler import profile", "from torch.profiler import profile as _profile"
    ).replace("with profile():", "with _profile():")
    folded = fold_test(renamed, SUITE_WITH_A_MODULE_LEVEL_NAME, "test/a.py", "test/b.py")
    assert "from torch.profiler import profile as _profile, record_function\n" in folded


SUITE_WITH_A_LATE_IMPORT = """\
import unittest

import torch
from torch.testing._internal.common_utils import (  # type: ignore[attr-defined]
    IS_WINDOWS,
)


TEST_GPU = torch.cuda.is_available()

from torch.testing._internal.common_utils import run_tests, TestCase


class TestFirst(TestCase):
    @unittest.skipIf(IS_WINDOWS or TEST_GPU, "no")
    def test_first(self):
        pass


from torch.utils.collect_env import get_pretty_env_info


class TestLast(TestCase):
    def test_last(self):
        self.assertTrue(get_pretty_env_info)


if __name__ == "__main__":
    run_tests()
"""

NEW_WITH_A_STDLIB_IMPORT = """\
import contextlib

from torch.testing._internal.common_utils import parametrize, TestCase


class TestNew(TestCase):
    @parametrize("x", [1])
    def test_new(self, x):
        with contextlib.nullcontext():
            pass
"""


def test_new_imports_go_to_the_suites_header_and_its_comment_free_import() -> None:
    folded = fold_test(NEW_WITH_A_STDLIB_IMPORT, SUITE_WITH_A_LATE_IMPORT, "test/a.py", "test/b.py")
    # Not the first import of the module (it holds a comment): the next one, comment-free.
    own = "from torch.testing._internal.common_utils import parametrize, run_tests, TestCase\n"
    assert own in folded
    # Above the first class, not after the import the suite makes between two classes.
    assert folded.index("import contextlib\n") < folded.index("class TestFirst")
    assert folded.index("class TestNew") > folded.index("class TestLast")


NEW_WITH_UNSORTED_IMPORTS = """\
import sys
import types

import torch
from torch.testing._internal.common_utils import skipIfTorchDynamo


class TestNewSorted(unittest.TestCase):
    @skipIfTorchDynamo("eager only")
    def test_modules(self):
        self.assertIsInstance(sys.modules["torch"], types.ModuleType)
"""


def test_a_fold_keeps_the_suite_usort_clean() -> None:
    # The fold puts `import sys` / `import types` among the suite's standard-library imports
    # and a new torch import after `import torch`, where usort puts them: PYFMT (usort, then
    # ruff format) leaves the folded suite as it is.
    folded = fold_test(
        NEW_WITH_UNSORTED_IMPORTS, UPSTREAM_SUITE, "test/test_amp_new.py", "test/test_amp.py"
    )
    head = folded.split("\n\n\nclass")[0]
    assert head.endswith(
        "import sys\nimport types\nimport unittest\n\nimport torch\n"
        "from torch.testing._internal.common_utils import skipIfTorchDynamo"
    ), head
    assert format_texts({"test/test_amp.py": folded}) == {"test/test_amp.py": folded}
