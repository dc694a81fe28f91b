"""Failures grouped by cause (issue 25): a recorded run of the quick profile on OpenReg (PyTorch's
own PrivateUse1 test backend, tests/conformance_runs/openreg-quick.json: its failures, without
their tracebacks) reads as about 20 causes, not one per parameter or per callable.

The messages are normalised (numbers, dtypes, device names, expressions naming a test's
parameter values) and a verdict of the suite is placed in the test that judged, never in
pytest's ``raises``, a lambda of a table or the suite's assertion helpers."""

from __future__ import annotations

import json
from pathlib import Path

from conformance import report

RECORDED = Path(__file__).parent / "conformance_runs" / "openreg-quick.json"


def _recorded() -> dict:
    return json.loads(RECORDED.read_text())


def _failing(run: dict) -> list[dict]:
    return [r for r in run["results"] if r["outcome"] in ("failed", "error")]


def _group_of(groups: list, test: str) -> list[str]:
    for _, members in groups:
        names = [m["nodeid"].split("::", 1)[1] for m in members]
        if test in names:
            return names
    raise AssertionError(f"{test} is in no group")


def test_the_recorded_openreg_run_reads_as_about_twenty_causes() -> None:
    run = _recorded()
    failing = _failing(run)
    assert len(failing) == 81
    groups = report.failure_groups(failing, run["backend"])
    assert 15 <= len(groups) <= 22, [key for key, _ in groups]
    # One view that copies is one cause, whatever the view (unfold, real, imag, view_as_real...)
    views = _group_of(groups, "test_view_shares_the_storage_of_its_base[unfold]")
    assert len(views) == 5, views
    # One missing kernel is one cause wherever a test reached it: OpenReg's float-only abs is
    # reached by autocast's l1_loss and log, the OpInfo tests, drawn inputs and logsumexp.
    abs_kernel = _group_of(groups, "test_opinfo[abs-float16]")
    assert len({name.split("[")[0] for name in abs_kernel}) >= 4, abs_kernel
    scalar_first = _group_of(
        groups, "test_python_scalar_operand_promotes_like_the_reference[sub-int]"
    )
    assert len(scalar_first) == 8, scalar_first
    # The frame that matters: never pytest's, a lambda's or the suite's assertion helpers.
    for _, members in groups:
        for result in members:
            assert not result["where"].startswith(("outcomes.py", "<string>", "assertions.py"))
            assert "<lambda>" not in result["where"], result


def test_the_old_grouping_split_the_same_run_into_one_cause_per_parameter() -> None:
    # What the grouping must not fall back to: the first error line and the callable alone.
    failing = _failing(_recorded())
    naive = {(r["error"], r["where"]) for r in failing}
    assert len(naive) > 40
    assert len(report.failure_groups(failing, "openreg")) < len(naive) / 2


def test_a_crashed_worker_is_one_cause_per_test_function() -> None:
    crashes = [
        {
            "nodeid": f"conformance/test_devices.py::test_x[{name}]",
            "outcome": "error",
            "error": f"worker 'gw{i}' crashed while running 'test_devices.py::test_x[{name}]'",
            "where": "",
        }
        for i, name in enumerate(["a", "b"])
    ]
    groups = report.failure_groups(crashes)
    assert [(key, len(members)) for key, members in groups] == [
        (("worker crashed", "test_devices.py::test_x"), 2)
    ]


def test_torch_faults_are_not_causes_of_the_backend() -> None:
    run = _recorded()
    faults = [r for r in run["results"] if r["outcome"] == "torch fault"]
    assert len(faults) == 32
    assert all(r["torch_fault"].startswith("torch's fault (") for r in faults)
    assert not report.failure_groups(faults, "openreg")
