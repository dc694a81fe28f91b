"""Torch's own faults are named as torch's (issue 25): one registry in the suite
(conformance/torch_faults.toml) of the CUDA assumptions in torch that its tests reach, each with
torch's file and line, the upstream link and the series patch that fixes it. A failure it
explains is reported as "torch fault" (terminal, JSON, JUnit, Markdown) and leaves the run green
unless --conformance-strict-torch; on a torch with the patch applied the test must pass; a
backend's manifest holds the backend's own failures only."""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from test_conformance_plugin import _site_claiming, run_suite

import conformance
from conformance import torch_faults

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(conformance.__file__).parent
SERIES = (REPO / "patches" / "series").read_text().split()


def test_every_registry_entry_names_a_test_torch_code_and_a_series_patch() -> None:
    faults = torch_faults.registry()
    assert len(faults) >= 40
    torch_root = Path(torch.__file__).parent.parent
    for fault in faults:
        module, _, name = fault.test.partition("::")
        source = (PACKAGE / module).read_text()
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", source, re.M), fault.test
        lines = (torch_root / fault.file).read_text().splitlines()
        assert 0 < fault.line <= len(lines), (fault.file, fault.line)
        assert fault.upstream.startswith("https://github.com/pytorch/pytorch/"), fault.upstream
        assert not fault.patch or fault.patch in SERIES, fault.patch
    assert sum(bool(f.patch) for f in faults) >= 40


def test_the_neuron_manifest_holds_neuron_failures_only() -> None:
    data = tomllib.loads((PACKAGE / "backends" / "neuron.toml").read_text())
    registered = {fault.test for fault in torch_faults.registry()}
    for entry in data["known_failures"]:
        assert "fixed_by" not in entry, entry["test"]
        assert entry["test"] not in registered, entry["test"]


def test_a_fault_is_torchs_only_when_the_failure_says_what_the_fault_says() -> None:
    # GradScaler's float64 inverse scale fails a device without float64; the same test failing
    # for another reason (a backend's broken abs kernel, say) is the backend's.
    nodeid = "conformance/test_autocast.py::test_grad_scaler_unscale_restores_the_gradients"
    fault = torch_faults.find(nodeid, "TypeError: Cannot create a torch.float64 tensor")
    assert fault is not None and fault.patch.startswith("0004-")
    assert fault.label() == f"torch's fault (patch {fault.patch} fixes it)"
    assert torch_faults.find(nodeid, "RuntimeError: Abs kernel only supports float type") is None
    # With the patch applied the entry explains nothing: the test must pass.
    assert torch_faults.find(nodeid, "float64", applied_patches=(fault.patch,)) is None
    assert torch_faults.find("conformance/test_rng.py::test_seed", "float64") is None


def test_a_registry_entry_without_its_fields_names_the_entry() -> None:
    with pytest.raises(torch_faults.RegistryError, match=r"faults\[0\] \('test_x.py::t'\)"):
        torch_faults.parse('[[faults]]\ntest = "test_x.py::t"\nfile = "torch/x.py"\n')
    with pytest.raises(torch_faults.RegistryError, match="line must be an integer"):
        torch_faults.parse(
            '[[faults]]\ntest = "t"\nfile = "f"\nline = "3"\nupstream = "u"\nreason = "r"\n'
        )


DLPACK_AND_COLLECT_ENV = ["-k", "dlpack or collect_env"]


def test_torch_faults_are_reported_apart_and_leave_the_run_green(tmp_path) -> None:
    junit = tmp_path / "run.xml"
    markdown = tmp_path / "run.md"
    completed, run = run_suite(
        tmp_path,
        "integration",
        *DLPACK_AND_COLLECT_ENV,
        f"--junitxml={junit}",
        f"--conformance-markdown={markdown}",
    )
    output = completed.stdout[-4000:]
    assert completed.returncode == 0, output
    faults = [r for r in run["results"] if r["outcome"] == "torch fault"]
    assert len(faults) == 3, output
    by_test = {r["nodeid"].split("::")[-1]: r["torch_fault"] for r in faults}
    assert by_test["test_dlpack_device_names_the_backend_device"].startswith(
        "torch's fault (patch 0002-dlpack-privateuse1-device.patch fixes it): "
    )
    assert (
        "[torch/_tensor.py:1688; https://github.com/pytorch/pytorch/pull/195815]"
        in (by_test["test_from_dlpack_shares_the_tensor_memory"])
    )
    assert "torch's own faults: 3 tests fail for a CUDA assumption in torch" in output
    assert "failures by root cause" not in output
    suite = ET.parse(junit).getroot().find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["conformance_torch_faults"] == "3"
    labelled = suite.findall(".//property[@name='conformance_torch_fault']")
    assert len(labelled) == 3
    text = markdown.read_text()
    assert "### Torch's own faults in neuron: 3 tests (not the backend's)" in text
    assert "torch fault" in text.split("| integration |", 1)[1].splitlines()[0]


def test_strict_torch_makes_torch_faults_fail_the_run(tmp_path) -> None:
    completed, run = run_suite(
        tmp_path, "integration", *DLPACK_AND_COLLECT_ENV, "--conformance-strict-torch"
    )
    assert completed.returncode == 1, completed.stdout[-3000:]
    failed = [r for r in run["results"] if r["outcome"] == "failed"]
    assert len(failed) == 3 and all(r["torch_fault"] for r in failed)
    assert run["strict_torch"] is True


def test_on_a_torch_with_the_patch_applied_the_test_must_pass(tmp_path) -> None:
    # The overlay record claims the DLPack patch (not collect_env's) on an unpatched torch: the
    # DLPack tests' failures are then failures, collect_env's is still torch's.
    site = _site_claiming(tmp_path, ["0002-dlpack-privateuse1-device.patch"])
    completed, run = run_suite(tmp_path, "integration", *DLPACK_AND_COLLECT_ENV, site=site)
    assert completed.returncode == 1, completed.stdout[-3000:]
    outcomes = {r["nodeid"].split("::")[-1]: r["outcome"] for r in run["results"]}
    assert outcomes["test_dlpack_device_names_the_backend_device"] == "failed"
    assert outcomes["test_from_dlpack_shares_the_tensor_memory"] == "failed"
    assert outcomes["test_collect_env_reports_the_accelerator"] == "torch fault"


def test_a_fault_that_surfaces_as_another_error_is_still_torchs() -> None:
    # DebugMode's float64 hash raises inside __torch_dispatch__: neuron's user sees x * 2 fail.
    nodeid = "conformance/test_integration.py::test_debug_mode_tensor_hashes_match_the_cpu"
    seen = "TypeError: unsupported operand type(s) for *: 'Tensor' and 'int'"
    fault = torch_faults.find(nodeid, seen)
    assert fault is not None and fault.patch.startswith("0019-")
    assert torch_faults.find(nodeid, "RuntimeError: Abs kernel only supports float type") is None
