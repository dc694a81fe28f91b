"""A vendor's path through the conformance suite (issue 15): `conformance init`, runs on probed
capabilities, --manifest-dir that adds to the packaged manifests, the usage error for an
accelerator without a manifest, declared autocast op lists, root-cause reports, and the two wrong
verdicts (a device-module synchronize, a memory timeline the host could fake).

Everything runs the real neuron backend in child processes. A backend "nobody declared" is
neuron seen through a copy of the suite without neuron.toml: the only out-of-tree PrivateUse1
backend on this machine (OpenReg needs PyTorch's sources).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import conformance_warm
import pytest
import torch

import conformance
from conformance import manifest as manifests
from conformance import report, session
from conformance.test_autocast import FLOAT32, LOWER_PRECISION

TESTS = Path(__file__).parent
PACKAGE = Path(conformance.__file__).parent
MANIFESTS = PACKAGE / "backends"


def child(
    args: list[str], tmp_path: Path, site: Path | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``python ARGS`` with tests/ (the mutants) and ``site`` (a copy of the suite) on the path."""
    path = [str(site)] if site is not None else []
    # TESTS.parent: this checkout's suite (after ``site``), wherever the child starts
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, str(TESTS), str(TESTS.parent)]))
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or tmp_path,
        timeout=400,
    )


def run_area(
    tmp_path: Path, areas: list[str], *extra: str, site: Path | None = None
) -> tuple[subprocess.CompletedProcess, dict, str]:
    """One or more areas on neuron (quick profile): (the child, the JSON run, the Markdown)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    command = ["-m", "pytest", "-p", "no:cacheprovider", "--conformance-backend=neuron"]
    command += ["--conformance-profile=quick", f"--conformance-json={out / 'run.json'}"]
    command += [f"--conformance-markdown={out / 'run.md'}", *extra, "--pyargs"]
    command += [f"conformance.test_{area}" for area in areas]
    if site is None:
        # A fork of a warm interpreter (tests/conformance_warm.py), in child()'s environment: the
        # same run without the imports of torch, numpy, hypothesis and pytest.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
        completed = conformance_warm.run_pytest(
            command[2:], env, out / "run.json", timeout=400, cwd=tmp_path
        )
    else:
        completed = child(command, tmp_path, site=site)
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    markdown = (out / "run.md").read_text() if (out / "run.md").exists() else ""
    return completed, run, markdown


def outcomes(run: dict) -> dict[str, str]:
    return {r["nodeid"].split("::", 1)[1]: r["outcome"] for r in run["results"]}


def output(completed: subprocess.CompletedProcess) -> str:
    return completed.stdout[-4000:] + completed.stderr[-3000:]


@pytest.fixture
def suite_without_neuron(tmp_path: Path) -> Path:
    """A copy of the suite that has never heard of neuron: no neuron.toml."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "conformance", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "conformance" / "backends" / "neuron.toml").unlink()
    return site


# ---- 1. conformance init, and runs on probed capabilities ----------------------------------


def test_init_writes_every_capability_commented_and_no_known_failures(tmp_path):
    target = tmp_path / "vendor" / "neuron.toml"
    completed = child(["-m", "conformance", "init", "neuron", "-o", str(target)], tmp_path)
    assert completed.returncode == 0, output(completed)
    assert f"conformance --backend neuron --manifest-dir {target.parent}" in completed.stdout
    text = target.read_text()
    data = tomllib.loads(text)
    assert set(data) == {"capabilities"}, "init must write no known failures"
    capabilities = data["capabilities"]
    fields = {"dtypes", "autocast_dtypes", *manifests.CAPABILITY_FLAGS, *manifests.OP_LISTS}
    assert set(capabilities) == fields, sorted(fields ^ set(capabilities))
    # Every value is commented with what the probe saw (the reviewer's evidence).
    body = text.split("[capabilities]", 1)[1]
    for line in body.splitlines():
        value = line.strip()
        if value and value != "]" and not value.endswith("= [") and not value.startswith("#"):
            assert "  # " in line, f"uncommented line: {line!r}"
    assert "REVIEW" in text and "never copied from another backend" in text
    # The probes agree with what this project declares for neuron, and with CUDA's op lists.
    probed = manifests.parse(text, "neuron", str(target)).capabilities
    declared = manifests.load("neuron").capabilities
    assert probed.dtypes == declared.dtypes
    assert probed.autocast_dtypes == declared.autocast_dtypes
    for flag in manifests.CAPABILITY_FLAGS:
        assert getattr(probed, flag) == getattr(declared, flag), flag
    assert probed.autocast_lower_precision_ops == set(LOWER_PRECISION)
    assert probed.autocast_float32_ops == set(FLOAT32)
    # float64 is commented out with the backend's own error as the evidence.
    assert '# "float64",' in text and "TypeError" in text

    again = child(["-m", "conformance", "init", "neuron", "-o", str(target)], tmp_path)
    assert again.returncode == 2 and "exists; pass --force" in again.stderr
    forced = child(["-m", "conformance", "init", "neuron", "-o", str(target), "--force"], tmp_path)
    assert forced.returncode == 0, output(forced)


def test_init_of_an_unregistered_backend_is_a_clear_error(tmp_path):
    completed = child(["-m", "conformance", "init", "warp"], tmp_path)
    assert completed.returncode == 2
    assert "torch has no device type 'warp'" in completed.stderr
    assert not (tmp_path / "warp.toml").exists()
    probed = [
        "-m",
        "pytest",
        "--conformance-backend=warp",
        "--conformance-capabilities=probed",
        "--pyargs",
        "conformance",
    ]
    completed = child(probed, tmp_path)
    assert completed.returncode == 4, output(completed)  # a usage error, not a crash
    assert "torch has no device type 'warp'" in completed.stderr


def test_a_run_on_probed_capabilities_is_labelled_probed_not_declared(
    tmp_path, suite_without_neuron
):
    completed, run, markdown = run_area(
        tmp_path, ["capabilities"], "--conformance-capabilities=probed", site=suite_without_neuron
    )
    assert completed.returncode == 0, output(completed)
    assert "manifest=probed, not declared" in completed.stdout  # the header
    assert "conformance: capabilities PROBED, NOT DECLARED: dtypes=" in completed.stdout
    assert "capabilities PROBED, NOT DECLARED (no manifest)" in completed.stdout  # the summary
    assert run["capabilities"] == "probed"
    assert "capabilities **probed, not declared**" in markdown
    # The capabilities area holds the probed capabilities to behaviour: all of it passes.
    assert set(outcomes(run).values()) == {"passed"}, outcomes(run)


def test_a_declared_run_says_so(tmp_path):
    completed, run, markdown = run_area(tmp_path, ["capabilities"])
    assert run["capabilities"] == "declared"
    assert "PROBED" not in completed.stdout and "probed" not in markdown


# ---- 2. --manifest-dir adds to the packaged manifests ----------------------------------------


def test_manifest_dir_adds_to_the_packaged_manifests(tmp_path):
    only_cpu = tmp_path / "only-cpu"
    only_cpu.mkdir()
    (only_cpu / "cpu.toml").write_text("[capabilities]\ndtypes = ['float32']\n")
    # A backend the directory lacks comes from the package; one it has overrides the package's.
    assert manifests.load("neuron", only_cpu).source == "conformance/backends/neuron.toml"
    assert manifests.load("cpu", only_cpu).source == str(only_cpu / "cpu.toml")
    with pytest.raises(manifests.ManifestError, match="not a directory"):
        manifests.load("neuron", tmp_path / "nowhere")
    with pytest.raises(manifests.ManifestError, match="conformance init warp"):
        manifests.load("warp", only_cpu)


def test_a_vendor_directory_with_one_file_runs_against_the_packaged_reference(tmp_path):
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    # neuron.toml only (no cpu.toml), with an entry that proves it is the one in use: a known
    # failure of a test that passes fails the run.
    (vendor / "neuron.toml").write_text(
        (MANIFESTS / "neuron.toml").read_text()
        + '\n[[known_failures]]\ntest = "test_capabilities.py::test_serialization"\n'
        'reason = "pretend"\nlink = "https://example.invalid/1"\n'
    )
    completed, run, _ = run_area(tmp_path, ["capabilities"], f"--conformance-manifest-dir={vendor}")
    assert completed.returncode == 1, output(completed)
    assert f"manifest={vendor / 'neuron.toml'}" in completed.stdout
    assert "reference=cpu" in completed.stdout
    assert outcomes(run)["test_serialization"] == "failed"  # XPASS(strict)
    assert sum(o == "passed" for o in outcomes(run).values()) == 19


# ---- 3. a current accelerator without a manifest ---------------------------------------------


@pytest.mark.parametrize("how", ["pyargs", "path", "xdist-folder", "backend"])
def test_a_current_accelerator_without_a_manifest_is_a_usage_error(
    tmp_path, suite_without_neuron, how
):
    site = suite_without_neuron
    args = {
        "pyargs": ["--pyargs", "conformance.test_capabilities"],
        "path": [str(site / "conformance" / "test_capabilities.py")],
        "xdist-folder": ["-n", "2", str(site)],
        "backend": ["--conformance-backend=neuron", "--pyargs", "conformance"],
    }[how]
    completed = child(["-m", "pytest", "-p", "no:cacheprovider", *args], tmp_path, site=site)
    assert completed.returncode == 4, output(completed)  # pytest's usage error
    assert "No manifest for backend 'neuron'" in completed.stderr
    assert "conformance init neuron" in completed.stderr
    assert "KeyError" not in output(completed) and "INTERNALERROR" not in output(completed)


def test_an_unrelated_pytest_run_is_left_alone_without_a_manifest(tmp_path, suite_without_neuron):
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_mine.py").write_text("def test_mine():\n    assert True\n")
    completed = child(
        ["-m", "pytest", "-p", "no:cacheprovider", "-q"], tmp_path, suite_without_neuron, project
    )
    assert completed.returncode == 0, output(completed)
    assert "1 passed" in completed.stdout


# ---- 4. autocast op lists --------------------------------------------------------------------


def test_manifest_autocast_op_lists_parse_and_default_to_cudas():
    base = "[capabilities]\ndtypes = ['float32']\n"
    default = manifests.parse(base, "demo", "demo.toml").capabilities
    assert default.autocast_lower_precision_ops is None and default.autocast_float32_ops is None
    declared = manifests.parse(
        base + "autocast_lower_precision_ops = ['mm']\nautocast_float32_ops = []\n",
        "demo",
        "demo.toml",
    ).capabilities
    assert declared.autocast_lower_precision_ops == {"mm"}
    assert declared.autocast_float32_ops == frozenset()
    with pytest.raises(manifests.ManifestError, match="must be a list of op names"):
        manifests.parse(base + "autocast_float32_ops = 'softmax'\n", "demo", "demo.toml")


def _vendor_manifest(tmp_path: Path, extra: str) -> Path:
    vendor = tmp_path / "vendor"
    vendor.mkdir(exist_ok=True)
    text = (MANIFESTS / "neuron.toml").read_text()
    text = text.replace("serialization = true\n", f"serialization = true\n{extra}", 1)
    (vendor / "neuron.toml").write_text(text)
    return vendor


AUTOCAST_LISTS = ["-k", "lower_precision_ops or precision_sensitive_ops or autocast_op_lists"]


def test_the_backend_is_held_to_its_declared_autocast_lists(tmp_path):
    # neuron lowers CUDA's lists; a manifest that declares only mm and softmax is wrong about
    # every other op, and exactly those tests fail.
    vendor = _vendor_manifest(
        tmp_path, 'autocast_lower_precision_ops = ["mm"]\nautocast_float32_ops = ["softmax"]\n'
    )
    _, run, _ = run_area(
        tmp_path, ["autocast"], f"--conformance-manifest-dir={vendor}", *AUTOCAST_LISTS
    )
    failed = {n for n, o in outcomes(run).items() if o == "failed"}
    expected = {
        f"{test}[{name}-torch.{dtype}]"
        for dtype in ("float16", "bfloat16")
        for test, table, keep in (
            ("test_lower_precision_ops_run_in_the_autocast_dtype", LOWER_PRECISION, "mm"),
            ("test_precision_sensitive_ops_run_in_float32", FLOAT32, "softmax"),
        )
        for name in table
        # cdist off the float32 list is not applicable: the CPU has no half-precision cdist
        if name not in (keep, "cdist")
    }
    assert failed == expected, sorted(failed ^ expected)
    assert "off the lower-precision list" in json.dumps(run["results"])


@pytest.mark.slow
def test_a_backend_that_lowers_fewer_ops_is_green_with_its_probed_lists(tmp_path):
    # The OpenReg case: autocast lowers (about) mm only. `conformance init` probes the lists; with
    # them the autocast area passes, with CUDA's default lists it does not.
    target = tmp_path / "probed" / "neuron.toml"
    code = (
        "import mutants.autocast_lowers_only_mm\n"
        "from conformance.cli import main\n"
        f"raise SystemExit(main(['init', 'neuron', '-o', {str(target)!r}]))\n"
    )
    completed = child(["-c", code], tmp_path)
    assert completed.returncode == 0, output(completed)
    probed = manifests.parse(target.read_text(), "neuron", "x").capabilities
    assert "mm" in probed.autocast_lower_precision_ops
    assert "bmm" not in probed.autocast_lower_precision_ops
    assert "softmax" not in probed.autocast_float32_ops
    mutant = ["-p", "mutants.autocast_lowers_only_mm", *AUTOCAST_LISTS]
    green, run, _ = run_area(
        tmp_path, ["autocast"], f"--conformance-manifest-dir={target.parent}", *mutant
    )
    assert green.returncode == 0, output(green)
    assert "failed" not in outcomes(run).values()
    (tmp_path / "default").mkdir()
    default, run, _ = run_area(tmp_path / "default", ["autocast"], *mutant)
    assert default.returncode == 1
    assert sum(o == "failed" for o in outcomes(run).values()) >= 20


def test_an_unknown_autocast_op_name_fails_naming_the_manifest(tmp_path):
    vendor = _vendor_manifest(tmp_path, 'autocast_lower_precision_ops = ["mm", "warp_mm"]\n')
    _, run, _ = run_area(
        tmp_path, ["autocast"], f"--conformance-manifest-dir={vendor}", *AUTOCAST_LISTS
    )
    (result,) = [r for r in run["results"] if "autocast_op_lists" in r["nodeid"]]
    assert result["outcome"] == "failed"
    assert "names ['warp_mm'], which the suite does not know" in result["detail"]


# ---- 8. the device module: only what the PrivateUse1 contract offers --------------------------

# What the suite may call on torch.<backend> (backend.module): the PrivateUse1 device-module
# contract (torch.utils.rename_privateuse1_backend) and the per-device RNG functions that
# torch.random.fork_rng and checkpoint call, which torch.accelerator does not offer. Anything
# torch.accelerator has (synchronize, current device, memory statistics) must go through it.
DEVICE_MODULE_CONTRACT = {
    "__name__",
    "device_count",
    "is_available",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "initial_seed",
}


# Read only where the device module has them (behind ``hasattr``): extra evidence, never required.
OPTIONAL_DEVICE_MODULE_USES = {"get_device_name"}


def _device_module_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, attribute) of each ``backend.module.X``, and of ``m.X`` for a name ``m`` assigned
    ``backend.module`` or returned by a function that returns it."""

    def is_module(node: ast.AST) -> bool:
        # backend.module, profiled_backend.module...: not a wrapped model's ``.module`` (DDP).
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "module"
            and isinstance(node.value, ast.Name)
            and "backend" in node.value.id
        )

    aliases = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and is_module(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    uses = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if is_module(node.value) or (isinstance(node.value, ast.Name) and node.value.id in aliases):
            uses.append((node.lineno, node.attr))
    return uses


def test_the_suite_uses_only_the_device_module_contract():
    offending = []
    for path in sorted([*PACKAGE.glob("test_*.py"), PACKAGE / "backend.py"]):
        for line, attr in _device_module_uses(ast.parse(path.read_text())):
            if attr not in DEVICE_MODULE_CONTRACT | OPTIONAL_DEVICE_MODULE_USES:
                offending.append(f"{path.name}:{line}: .{attr}")
    assert not offending, (
        "the suite calls torch.<backend> for what the PrivateUse1 device-module contract does "
        f"not guarantee (use torch.accelerator): {offending}"
    )


def test_the_contract_check_sees_the_old_synchronize_call():
    # What test_non_blocking_copies_both_ways did before: the check must flag it.
    old = "def f(backend):\n    backend.module.synchronize()\n    m = backend.module\n    m.foo\n"
    assert sorted(_device_module_uses(ast.parse(old))) == [(2, "synchronize"), (4, "foo")]
    # A wrapped model's .module (DDP, DataParallel) is not the device module.
    assert _device_module_uses(ast.parse("model.module.weight\nddp.module.x\n")) == []


def test_a_device_module_without_synchronize_passes_the_copy_tests(tmp_path):
    completed, run, _ = run_area(
        tmp_path, ["creation"], "-p", "mutants.no_module_synchronize", "-k", "non_blocking"
    )
    assert completed.returncode == 0, output(completed)
    assert outcomes(run) == {"test_non_blocking_copies_both_ways": "passed"}


# ---- 9. the memory timeline must be the device's -----------------------------------------------


def test_a_host_timeline_with_the_same_peak_does_not_pass_the_memory_timeline_check(tmp_path):
    # Stock torch exports the host's timeline by default (the known failure). A backend that
    # stages fills on the host gives that timeline the device's peak: the test must still fail.
    completed, run, _ = run_area(
        tmp_path, ["integration"], "-p", "mutants.host_staged_fill", "-k", "memory_timeline"
    )
    result = outcomes(run)["test_memory_timeline_defaults_to_the_current_accelerator"]
    if run["patches"]:
        assert result == "passed", output(completed)  # the series fixes it
    else:
        assert result == "torch fault", output(completed)  # torch's, and seen: not a pass


# ---- reports -----------------------------------------------------------------------------------


def _failing(nodeid: str, error: str, where: str, dump: str = "") -> dict:
    return {
        "nodeid": f"conformance/{nodeid}",
        "area": nodeid.split(".py")[0].removeprefix("test_"),
        "outcome": "failed",
        "detail": error,
        "error": error,
        "where": where,
        "dispatcher_dump": dump,
    }


def test_failures_group_by_first_error_line_and_callable():
    results = [
        _failing("test_ops.py::test_a[3]", "AssertionError: off by 3 at [3, 4]", "t.py::test_a"),
        _failing("test_ops.py::test_a[7]", "AssertionError: off by 7 at [7, 1]", "t.py::test_a"),
        _failing("test_ops.py::test_b", "AssertionError: off by 3 at [3, 4]", "t.py::test_b"),
        _failing("test_ops.py::test_c", "TypeError: no float64", "t.py::test_c"),
        _failing("test_ops.py::test_d", "TypeError: no float16", "t.py::test_c"),
    ]
    groups = report.failure_groups(results)
    sizes = [len(members) for _, members in groups]
    # Numbers and dtypes are masked: the same bug at other sizes or in other dtypes is one cause;
    # the same verdict of the suite in another test is another; an exception torch or the
    # backend raised is one cause wherever a test reached it.
    assert sizes == [2, 2, 1], groups
    assert groups[0][0] == ("AssertionError: off by N at [N]", "t.py::test_a")
    assert groups[1][0] == ("TypeError: no <dtype>", "")


def test_markdown_lists_the_failures_under_the_counts_with_the_dump_folded():
    dump = "\n".join(f"Key{i}: registered at file.cpp:{i} [kernel]" for i in range(5))
    run = {
        "label": "vendor",
        "backend": "warp",
        "torch": "2.13.0",
        "profile": "quick",
        "results": [
            _failing("test_ops.py::test_a", "NotImplementedError: Could not run", "x.py::f", dump),
            _failing("test_ops.py::test_b", "NotImplementedError: Could not run", "x.py::f", dump),
            {"nodeid": "conformance/test_ops.py::test_c", "area": "ops", "outcome": "passed"},
        ],
    }
    text = report.matrix([run])
    counts = text.index("| ops | FAIL: 1 passed, 2 failed |")
    failures = text.index("### Failures of vendor: 2 in 1 causes")
    assert counts < failures
    assert "- **2** x `NotImplementedError: Could not run` in `x.py::f`" in text
    assert "  - `test_ops.py::test_a` (failed)" in text and "  - `test_ops.py::test_b`" in text
    assert "<details><summary>dispatcher dump (5 lines)</summary>" in text
    assert text.count("Key0: registered at") == 1  # one fold per cause


def test_the_backends_own_exception_comes_first_with_the_dispatcher_dump_cut_out():
    # A real dispatcher error: an op with a kernel for one backend only, called on another
    # (neuron runs any op without a kernel of its own on the host, so it cannot give one; the CPU
    # stands for a backend that lacks the kernel).
    library = torch.library.Library("vendor_probe", "DEF")
    library.define("only_cuda(Tensor x) -> Tensor")
    library.impl("only_cuda", lambda x: x.clone(), "CUDA")

    def call() -> None:
        torch.ops.vendor_probe.only_cuda(torch.ones(2))

    with pytest.raises(NotImplementedError) as excinfo:
        call()
    longrepr = str(excinfo.getrepr())
    assert "registered at" in longrepr  # the listing is there to cut
    failure = session._failure(excinfo, longrepr)
    assert failure["error"] == (
        "NotImplementedError: Could not run 'vendor_probe::only_cuda' with arguments from the "
        "'CPU' backend."
    )
    assert failure["where"].endswith("::__call__") or failure["where"].endswith("::call")
    assert failure["detail"].startswith("NotImplementedError: Could not run")
    assert "registered at" not in failure["detail"]
    assert "CUDA: registered at" in failure["dispatcher_dump"]
    assert "only available for these backends" in failure["dispatcher_dump"]


def test_run_reports_causes_and_keeps_every_not_applicable_reason(tmp_path):
    # wrong_values breaks add: the float dtypes' probes fail with one cause.
    completed, run, markdown = run_area(tmp_path, ["capabilities"], "-p", "mutants.wrong_values")
    assert completed.returncode == 1
    summary = completed.stdout.split("conformance ===")[-1]
    assert "failures by root cause: 2 in 1 causes" in summary, summary
    failed = [r for r in run["results"] if r["outcome"] == "failed"]
    assert all(r["error"].startswith("AssertionError: ") for r in failed)
    assert all(
        r["where"] == "test_capabilities.py::test_declared_dtypes_match_behaviour" for r in failed
    )
    assert "### Failures of neuron: 2 in 1 causes" in markdown
    # Not-applicable results keep their reason (the CPU declares no streams).
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    command = [
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--conformance-backend=cpu",
        "--conformance-profile=quick",
    ]
    command += [
        f"--conformance-json={cpu / 'run.json'}",
        "--pyargs",
        "conformance.test_capabilities",
    ]
    assert child(command, cpu).returncode == 0
    skipped = [r for r in json.loads((cpu / "run.json").read_text())["results"]
               if r["outcome"] == "not applicable"]  # fmt: skip
    assert skipped and all(r["detail"].startswith("not applicable: ") for r in skipped), skipped
    assert any(r["detail"] == "not applicable: streams not declared" for r in skipped)
