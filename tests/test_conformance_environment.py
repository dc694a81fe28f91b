"""The suite is quiet in any environment (issue 25): the pytest plugin costs nothing in a pytest run
that does not ask for the suite (no torch import, no option that clashes with a project's own
--backend); both entry points share one default profile; bad input is a usage error (exit 4)
before the run, naming what is wrong: an unwritable --junitxml, a known failure whose fields are
not strings, a manifest that is not UTF-8, a device name torch does not know; stale known
failures fail the run under xdist too, and an entry without its [param] says so; every runtime
import of the suite is a declared dependency."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from test_conformance_plugin import MANIFESTS, manifest_dir_with, run_suite

import conformance
from conformance import cli, plugin

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(conformance.__file__).parent

A_VENDORS_PROJECT = {
    "conftest.py": (
        "import sys\n\n\n"
        "def pytest_addoption(parser):\n"
        '    parser.addoption("--backend", default="mine")\n\n\n'
        "def pytest_sessionfinish(session):\n"
        '    print("\\nIMPORTED", "torch" in sys.modules, "hypothesis" in sys.modules)\n'
    ),
    "test_mine.py": "def test_mine(request):\n"
    '    assert request.config.getoption("backend") == "theirs"\n',
}


def pytest_in(folder: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=folder,
        # this checkout's suite, wherever the run starts
        env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})),
        timeout=300,
    )


def test_a_project_of_its_own_pays_nothing_for_the_installed_plugin(tmp_path) -> None:
    for name, text in A_VENDORS_PROJECT.items():
        (tmp_path / name).write_text(text)
    completed = pytest_in(tmp_path, "-s", "--backend=theirs", "-p", "no:hypothesispytest")
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert "IMPORTED False False" in completed.stdout  # neither torch nor hypothesis
    assert "conformance:" not in completed.stdout  # no header either


def test_both_entry_points_default_to_the_same_profile() -> None:
    assert plugin.DEFAULT_PROFILE == "quick"
    parser_default = cli.DEFAULT_PROFILE
    assert parser_default == plugin.DEFAULT_PROFILE


def test_an_unwritable_junitxml_is_a_usage_error_before_the_run(tmp_path) -> None:
    (tmp_path / "a-file").write_text("")
    completed, _ = run_suite(tmp_path, "capabilities", f"--junitxml={tmp_path}/a-file/out.xml")
    assert completed.returncode == 4, completed.stdout[-2000:]
    assert "--junitxml=" in completed.stderr and "cannot write the report there" in (
        completed.stderr
    )
    assert " passed" not in completed.stdout


def test_a_known_failure_with_a_field_of_the_wrong_type_names_the_entry(tmp_path) -> None:
    directory = manifest_dir_with(
        tmp_path, '\n[[known_failures]]\ntest = "test_rng.py::test_seed"\nreason = 3\nlink = "l"\n'
    )
    completed, _ = run_suite(tmp_path, "capabilities", f"--conformance-manifest-dir={directory}")
    assert completed.returncode == 4, completed.stdout[-2000:]
    assert "('test_rng.py::test_seed'): reason must be a non-empty string, not 3" in (
        completed.stderr
    )
    assert "INTERNALERROR" not in completed.stdout + completed.stderr


def test_a_manifest_that_is_not_utf8_is_a_usage_error(tmp_path) -> None:
    directory = tmp_path / "manifests"
    directory.mkdir()
    text = (MANIFESTS / "neuron.toml").read_text().split("[[known_failures]]")[0]
    (directory / "neuron.toml").write_bytes(("# caf\xe9\n" + text).encode("latin-1"))
    completed, _ = run_suite(tmp_path, "capabilities", f"--conformance-manifest-dir={directory}")
    assert completed.returncode == 4, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert "not UTF-8 text" in completed.stderr
    assert "INTERNALERROR" not in completed.stdout + completed.stderr


def test_a_mistyped_device_name_suggests_the_registered_accelerator(tmp_path) -> None:
    completed = pytest_in(tmp_path, "--conformance-backend=nueron", "--pyargs", "conformance")
    assert completed.returncode == 4, completed.stdout[-2000:]
    assert "torch has no device type 'nueron'" in completed.stderr
    assert "Did you mean 'neuron'?" in completed.stderr


def test_stale_and_param_less_known_failures_fail_the_run_under_xdist(tmp_path) -> None:
    # The `conformance` command always runs xdist: its controller collects nothing.
    directory = manifest_dir_with(
        tmp_path,
        '\n[[known_failures]]\ntest = "test_capabilities.py::test_that_was_renamed"\n'
        'reason = "stale"\nlink = "https://example.invalid/2"\n'
        '\n[[known_failures]]\ntest = "test_capabilities.py::test_declared_dtypes_match_behaviour"'
        '\nreason = "no [param]"\nlink = "https://example.invalid/3"\n',
    )
    completed, run = run_suite(
        tmp_path, "capabilities", "-n", "2", f"--conformance-manifest-dir={directory}"
    )
    output = completed.stdout[-4000:]
    assert completed.returncode == 1, output
    assert "STALE MANIFEST ENTRY: 'test_capabilities.py::test_that_was_renamed'" in output
    assert "the test is parametrized: name each variant with its [param] " in output
    assert "test_declared_dtypes_match_behaviour[torch.bfloat16]" in output
    stale = {entry["test"].split("::")[-1]: entry for entry in run["stale_known_failures"]}
    assert set(stale) == {"test_that_was_renamed", "test_declared_dtypes_match_behaviour"}


def _third_party_imports() -> set[str]:
    """The top-level modules the suite imports that are not the standard library's."""
    names = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"conformance", "_pytest"}


# The distribution that provides each module the suite imports; matplotlib is optional (its test
# skips without it, through pytest.importorskip).
PROVIDERS = {
    "torch": "torch",
    "numpy": "numpy",
    "pytest": "pytest",
    "hypothesis": "hypothesis",
    "xdist": "pytest-xdist",
    "pytest_timeout": "pytest-timeout",
    "expecttest": "expecttest",
}
OPTIONAL = {"matplotlib"}


def test_every_runtime_import_of_the_suite_is_a_declared_dependency() -> None:
    imported = _third_party_imports()
    assert imported - OPTIONAL <= set(PROVIDERS), sorted(imported - OPTIONAL - set(PROVIDERS))
    # torch.testing._internal (the operators area) imports numpy and expecttest.
    needed = {PROVIDERS[name] for name in imported - OPTIONAL} | {"numpy", "expecttest"}
    needed |= {"pytest-xdist", "pytest-timeout"}  # the command's -n, the profiles' timeouts
    for pyproject in (REPO / "pyproject.toml", REPO / "packaging/conformance/pyproject.toml"):
        dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
        declared = {Requirement(line).name for line in dependencies}
        assert needed <= declared, (pyproject, sorted(needed - declared))


def test_the_plugin_module_imports_neither_torch_nor_hypothesis() -> None:
    code = (
        "import sys, conformance.plugin, conformance.report\n"
        "print(sorted(m for m in ('torch', 'hypothesis', 'numpy') if m in sys.modules))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
    )
    assert completed.stdout.strip() == "[]", completed.stdout + completed.stderr


def test_a_timeout_is_reported_as_a_timeout_with_the_option_that_raises_it(tmp_path) -> None:
    # hang_on_sum: sum on neuron never returns; test_event_timing calls it.
    markdown = tmp_path / "run.md"
    completed, run = run_suite(
        tmp_path,
        "capabilities",
        "-p",
        "mutants.hang_on_sum",
        "--timeout=3",
        "-k",
        "test_event_timing",
        f"--conformance-markdown={markdown}",
    )
    output = completed.stdout[-3000:]
    assert completed.returncode == 1, output  # it fails the run ...
    (result,) = run["results"]
    assert result["outcome"] == "timeout", result  # ... as a timeout, not a verdict
    assert result["timeout"].startswith("timeout, not a semantic failure: the test ran past 3")
    assert "--timeout=SECONDS" in result["timeout"]
    assert "timeouts: 1 tests (timeout, not a semantic failure" in output
    assert "failures by root cause" not in output
    text = markdown.read_text()
    assert "### Timeouts in neuron: 1 tests" in text and "FAIL: 1 timeout" in text


def test_the_distributed_launch_fits_inside_the_test_timeout() -> None:
    from conformance.plugin import PROFILES
    from conformance.test_distributed import launch_timeout

    class Config:
        def __init__(self, profile: str, timeout: float | None) -> None:
            self.options = {"conformance_profile": profile, "timeout": timeout}

        def getoption(self, name: str, default: object = None) -> object:
            return self.options.get(name, default)

    for profile, (_, limit) in PROFILES.items():
        assert launch_timeout(Config(profile, None)) < limit
    assert launch_timeout(Config("quick", 50)) < 50


@pytest.mark.slow  # about 100 s on 2 busy cores: xdist replaces the crashed worker
def test_a_crash_is_reported_with_its_signal_and_stack(tmp_path) -> None:
    # crash_on_sum: sum on neuron aborts the interpreter; xdist isolates it in a worker.
    completed, run = run_suite(
        tmp_path, "capabilities", "-n", "2", "-p", "mutants.crash_on_sum", "-k", "event_timing"
    )
    output = completed.stdout[-3000:]
    assert completed.returncode == 1, output
    (result,) = run["results"]
    assert result["outcome"] in ("failed", "error"), result
    assert result["error"].endswith("(Aborted)"), result["error"]
    assert result["where"] == "crash_on_sum.py::_sum", result["where"]
    assert "Fatal Python error: Aborted" in result["detail"]
    assert "(Aborted)" in output
