"""The conformance plugin's own behaviour: manifests, strict known failures, stale entries,
reports and the report header."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import conformance_warm
import pytest

import conformance
from conformance import manifest as manifests
from conformance import report

TESTS = Path(__file__).parent
MANIFESTS = Path(conformance.__file__).parent / "backends"


def run_suite(
    tmp_path: Path, area: str, *extra: str, site: Path | None = None, **options: Any
) -> tuple[subprocess.CompletedProcess, dict]:
    """Run one area on neuron in a child; ``site`` goes first on the path (a torch to use);
    ``options`` go to subprocess.run (``cwd``: by default here, above the conformance package)."""
    report_path = tmp_path / "run.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--conformance-backend=neuron",
        "--conformance-profile=quick",
        f"--conformance-json={report_path}",
        *extra,
        "--pyargs",
        f"conformance.test_{area}",
    ]
    path = [str(site)] if site is not None else []
    # TESTS.parent: this checkout's suite (after ``site``), wherever the child starts
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*path, str(TESTS), str(TESTS.parent)]))
    if site is None and set(options) <= {"cwd"}:
        # A fork of a warm interpreter (tests/conformance_warm.py): the same run without the
        # imports of torch, numpy, hypothesis and pytest. A torch of ``site`` runs fresh.
        completed = conformance_warm.run_pytest(
            command[3:], env, report_path, timeout=300, cwd=options.get("cwd")
        )
    else:
        completed = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=300, **options
        )
    run = json.loads(report_path.read_text()) if report_path.exists() else {}
    return completed, run


def manifest_dir_with(tmp_path: Path, known_failures: str) -> Path:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "cpu.toml").write_text((MANIFESTS / "cpu.toml").read_text())
    (directory / "neuron.toml").write_text((MANIFESTS / "neuron.toml").read_text() + known_failures)
    return directory


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[capabilities]\ndtypes = ['float32']\nwarp_drive = true\n", "unknown capability"),
        ("[capabilities]\ndtypes = ['float33']\n", "'float33' is not a torch dtype"),
        ("[capabilities]\nstreams = true\n", "must list dtypes"),
        ("[capabilities]\ndtypes = ['float32']\nstreams = 'yes'\n", "must be true or false"),
        ("[capabilities\n", "not valid TOML"),
        (
            "[capabilities]\ndtypes = ['float32']\n[[known_failures]]\ntest = 'x'\nreason = 'y'\n",
            "needs the test, a reason and a link",
        ),
        (
            "[capabilities]\ndtypes = ['float32']\n[[known_failures]]\ntest = 'x'\nreason = 'y'\n"
            "link = 'z'\nfixed_by = '0001'\n",
            "fixed_by must name patch files of the series",
        ),
        (
            "[capabilities]\ndtypes = ['float32']\n[[known_failures]]\ntest = 'x'\nreason = 'y'\n"
            "link = 'z'\nfixed = '0001-a.patch'\n",
            "unknown field",
        ),
    ],
)
def test_malformed_manifest_is_a_clear_error_naming_the_file(text, message):
    with pytest.raises(manifests.ManifestError, match=message) as error:
        manifests.parse(text, "demo", "backends/demo.toml")
    assert "backends/demo.toml" in str(error.value)


def test_every_shipped_manifest_parses():
    for path in MANIFESTS.glob("*.toml"):
        parsed = manifests.load(path.stem)
        assert parsed.capabilities.dtypes, path


def test_known_failure_matches_node_id_suffixes_only():
    entry = manifests.KnownFailure("test_rng.py::test_seed", "r", "l")
    assert entry.matches("conformance/test_rng.py::test_seed")
    assert not entry.matches("conformance/test_rng.py::test_seed_all")
    assert not entry.matches("conformance/xtest_rng.py::test_seed")


def test_unknown_backend_is_a_usage_error(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "--conformance-backend=warp", "--pyargs", "conformance"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 4  # pytest's usage error
    assert "torch has no device type 'warp'" in completed.stderr
    assert "the accelerators registered here are neuron (and cpu)" in completed.stderr


def test_report_header_names_backend_devices_torch_profile_and_seed(tmp_path):
    completed, _ = run_suite(tmp_path, "capabilities", "--hypothesis-seed=7")
    header = next(line for line in completed.stdout.splitlines() if "conformance: backend=" in line)
    assert "backend=neuron devices=2 reference=cpu" in header
    assert "profile=quick seed=7" in header and "torch=2." in header


def test_known_failure_that_passes_fails_the_run(tmp_path):
    directory = manifest_dir_with(
        tmp_path,
        '\n[[known_failures]]\ntest = "test_capabilities.py::test_serialization"\n'
        'reason = "pretend"\nlink = "https://example.invalid/1"\n',
    )
    completed, run = run_suite(tmp_path, "capabilities", f"--conformance-manifest-dir={directory}")
    assert completed.returncode == 1
    outcome = {r["nodeid"].split("::")[-1]: r["outcome"] for r in run["results"]}
    assert outcome["test_serialization"] == "failed"
    assert "XPASS(strict)" in completed.stdout


def test_stale_manifest_entry_fails_the_run(tmp_path):
    directory = manifest_dir_with(
        tmp_path,
        '\n[[known_failures]]\ntest = "test_capabilities.py::test_that_was_renamed"\n'
        'reason = "stale"\nlink = "https://example.invalid/2"\n',
    )
    completed, run = run_suite(tmp_path, "capabilities", f"--conformance-manifest-dir={directory}")
    assert completed.returncode == 1
    assert "STALE MANIFEST ENTRY: 'test_capabilities.py::test_that_was_renamed'" in completed.stdout
    assert run["stale_known_failures"][0]["test"].endswith("test_that_was_renamed")


def wrong_values_known_failures(extra: str = "") -> str:
    """Manifest entries for the two failures the wrong_values mutant causes (add is off by
    0.1%), each with ``extra`` fields appended."""
    return "".join(
        f'\n[[known_failures]]\ntest = "test_capabilities.py::'
        f'test_declared_dtypes_match_behaviour[torch.{name}]"\nreason = "add is off by 0.1%"\n'
        f'link = "https://example.invalid/3"\n{extra}'
        for name in ("float32", "float16")
    )


def test_known_failure_that_fails_is_reported_as_known(tmp_path):
    # The wrong_values mutant breaks add; the manifest knows the resulting failures.
    directory = manifest_dir_with(tmp_path, wrong_values_known_failures())
    completed, run = run_suite(
        tmp_path,
        "capabilities",
        f"--conformance-manifest-dir={directory}",
        "-p",
        "mutants.wrong_values",
    )
    assert completed.returncode == 0, completed.stdout[-2000:]
    assert sum(r["outcome"] == "known" for r in run["results"]) == 2


def test_report_merges_runs_into_one_matrix(tmp_path, capsys):
    runs = []
    for label, outcome in (("stock", "known"), ("patched", "passed")):
        path = tmp_path / f"{label}.json"
        report.write_json(
            path,
            {
                "label": label,
                "backend": "neuron",
                "reference": "cpu",
                "torch": "2.13.0",
                "profile": "quick",
                "stale_known_failures": [],
                "results": [
                    {
                        "nodeid": "conformance/test_integration.py::test_x",
                        "area": "integration",
                        "outcome": outcome,
                        "detail": "",
                    },
                    {
                        "nodeid": "conformance/test_rng.py::test_y",
                        "area": "rng",
                        "outcome": "passed",
                        "detail": "",
                    },
                ],
            },
        )
        runs.append(str(path))
    markdown = tmp_path / "matrix.md"
    assert report.main([*runs, "--markdown", str(markdown)]) == 0
    table = markdown.read_text()
    assert "| area | stock | patched |" in table
    assert "| integration | ok: 1 known | ok: 1 passed |" in table
    assert capsys.readouterr().out == table
    # The per-test view: only the test whose outcome changed, with both outcomes.
    assert "Tests whose outcome differs between the neuron runs:" in table
    assert "| `test_integration.py::test_x` | known | passed |" in table
    assert "test_rng.py::test_y` |" not in table


def test_report_rejects_a_file_that_is_not_a_run(tmp_path):
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"hello": 1}')
    with pytest.raises(SystemExit, match="is not a conformance run"):
        report.main([str(bogus)])


@pytest.mark.parametrize(
    ("mutant", "where"),
    [("crash_on_sum", "checkout"), ("hang_on_sum", "checkout"), ("crash_on_sum", "project")],
)
def test_a_crash_or_hang_fails_that_test_and_the_run_goes_on(tmp_path, mutant, where):
    # test_event_timing calls sum(); everything else in the area must still run and pass. From
    # a project directory, xdist's report of the crashed worker has the "::test_x" node id.
    cwd = None
    if where == "project":
        cwd = tmp_path / "project"
        cwd.mkdir()
    completed, run = run_suite(
        tmp_path, "capabilities", "-n", "2", "--timeout=10", "-p", f"mutants.{mutant}", cwd=cwd
    )
    outcomes = {r["nodeid"].split("::")[-1]: r["outcome"] for r in run["results"]}
    # a hang is stopped by --timeout and reported as a timeout; a crash fails the test
    expected = ("timeout",) if mutant == "hang_on_sum" else ("failed", "error")
    assert outcomes.pop("test_event_timing") in expected, completed.stdout[-2000:]
    assert len(outcomes) == 19 and set(outcomes.values()) == {"passed"}
    assert completed.returncode == 1


def test_fixed_by_reads_one_patch_or_several():
    text = (
        "[capabilities]\ndtypes = ['float32']\n"
        "[[known_failures]]\ntest = 'a'\nreason = 'r'\nlink = 'l'\nfixed_by = '0001-x.patch'\n"
        "[[known_failures]]\ntest = 'b'\nreason = 'r'\nlink = 'l'\n"
        "fixed_by = ['0001-x.patch', '0002-y.patch']\n"
        "[[known_failures]]\ntest = 'c'\nreason = 'r'\nlink = 'l'\n"
    )
    one, two, unfixed = manifests.parse(text, "demo", "demo.toml").known_failures
    assert one.fixed_in(("0001-x.patch",)) and not one.fixed_in(())
    assert not two.fixed_in(("0001-x.patch",))  # every patch it names must be applied
    assert two.fixed_in(("0002-y.patch", "0001-x.patch", "0003-z.patch"))
    assert not unfixed.fixed_in(("0001-x.patch",))


def _write_state(site: Path, state: str, names: list[str]) -> None:
    record = site / ".device_agnostic_patches" / "state.json"
    record.parent.mkdir(parents=True)
    series = [{"name": name, "sha256": "0" * 64} for name in names]
    record.write_text(json.dumps({"format": 1, "state": state, "series": series}))


def test_applied_patches_come_from_the_overlay_record(tmp_path):
    from conformance.patched import applied_patches

    assert applied_patches(tmp_path) == ()  # stock: no record
    _write_state(tmp_path, "applied", ["0001-x.patch", "0002-y.patch"])
    assert applied_patches(tmp_path) == ("0001-x.patch", "0002-y.patch")
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    _write_state(interrupted, "applying", ["0001-x.patch"])
    assert applied_patches(interrupted) == ()  # an incomplete apply is not a patched torch


def _site_claiming(tmp_path: Path, names: list[str]) -> Path:
    """A folder whose ``torch`` is the installed one (a symlink) and whose overlay record says
    ``names`` are applied: how the plugin sees a torch patched by the series."""
    import torch

    site = tmp_path / "site"
    site.mkdir()
    (site / "torch").symlink_to(Path(torch.__file__).parent, target_is_directory=True)
    _write_state(site, "applied", names)
    return site


FIXED_ENTRY = (
    '\n[[known_failures]]\ntest = "test_capabilities.py::test_serialization"\n'
    'reason = "pretend torch breaks it"\nlink = "https://example.invalid/4"\n'
    'fixed_by = "0042-fix-serialization.patch"\n'
)


def test_a_fixed_known_failure_must_pass_on_a_patched_torch(tmp_path):
    directory = manifest_dir_with(tmp_path, FIXED_ENTRY)
    site = _site_claiming(tmp_path, ["0042-fix-serialization.patch"])
    completed, run = run_suite(
        tmp_path, "capabilities", f"--conformance-manifest-dir={directory}", site=site
    )
    assert completed.returncode == 0, completed.stdout[-2000:]
    assert "torch is patched (1 patches of the device-agnostic series)" in completed.stdout
    assert run["patches"] == ["0042-fix-serialization.patch"]
    outcome = {r["nodeid"].split("::")[-1]: r["outcome"] for r in run["results"]}
    assert outcome["test_serialization"] == "passed"


def test_a_fixed_known_failure_that_still_fails_on_a_patched_torch_fails_the_run(tmp_path):
    # wrong_values breaks add; the entry claims the series fixes the failures it causes.
    fixed_by = 'fixed_by = "0042-fix-add.patch"\n'
    directory = manifest_dir_with(tmp_path, wrong_values_known_failures(fixed_by))
    site = _site_claiming(tmp_path, ["0042-fix-add.patch"])
    completed, run = run_suite(
        tmp_path,
        "capabilities",
        f"--conformance-manifest-dir={directory}",
        "-p",
        "mutants.wrong_values",
        site=site,
    )
    assert completed.returncode == 1
    failed = [r["nodeid"] for r in run["results"] if r["outcome"] == "failed"]
    assert len(failed) == 2 and all("declared_dtypes_match_behaviour" in n for n in failed)


# ---- runs from elsewhere: a user's project directory, an installed (non-editable) copy ----


def test_a_run_from_an_unrelated_directory_reports_every_test_with_stable_ids(tmp_path):
    # pytest's node ids are relative to the rootdir, here a directory that is not above the
    # package ("::test_x"); the results must still be recorded, under the package-relative id,
    # and the manifest's known failures must still match.
    project = tmp_path / "project"
    project.mkdir()
    directory = manifest_dir_with(tmp_path, wrong_values_known_failures())
    completed, run = run_suite(
        tmp_path,
        "capabilities",
        f"--conformance-manifest-dir={directory}",
        "-p",
        "mutants.wrong_values",
        cwd=project,
    )
    assert completed.returncode == 0, completed.stdout[-3000:]
    nodeids = [r["nodeid"] for r in run["results"]]
    assert len(nodeids) == 20
    assert all(n.startswith("conformance/test_capabilities.py::test_") for n in nodeids), nodeids
    assert {r["area"] for r in run["results"]} == {"capabilities"}
    assert sum(r["outcome"] == "known" for r in run["results"]) == 2
    assert "capabilities" in completed.stdout.split("conformance ===")[-1]


def test_an_installed_copy_run_from_a_project_directory_writes_the_report(tmp_path):
    # A non-editable install: the package copied to a site directory first on the path (with
    # one area only, which also proves that the copy, not the checkout, ran), and the
    # `conformance` command (2 xdist workers) run from the user's project directory.
    site = tmp_path / "site"
    shutil.copytree(
        Path(conformance.__file__).parent,
        site / "conformance",
        ignore=lambda _, names: [
            n
            for n in names
            if n == "__pycache__" or n.startswith("test_") and n != "test_capabilities.py"
        ],
    )
    project = tmp_path / "project"
    project.mkdir()
    command = [sys.executable, "-m", "conformance", "--backend=cpu", "--profile=quick"]
    command += ["--json=out.json", "--markdown=out.md"]
    env = dict(os.environ, PYTHONPATH=str(site))
    completed = subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=project, timeout=300
    )
    output = completed.stdout[-3000:] + completed.stderr[-2000:]
    assert completed.returncode == 0, output
    run = json.loads((project / "out.json").read_text())
    nodeids = sorted(r["nodeid"] for r in run["results"])
    assert len(nodeids) == 20, nodeids
    assert all(n.startswith("conformance/test_capabilities.py::test_") for n in nodeids), nodeids
    assert "| capabilities | ok: " in (project / "out.md").read_text()


# ---- reports that cannot be written, and interrupted runs ----


@pytest.mark.parametrize(
    ("option", "where"),
    [
        ("--conformance-json", "under-a-file"),
        ("--conformance-json", "proc"),
        ("--conformance-markdown", "under-a-file"),
    ],
)
def test_an_unwritable_report_path_is_a_usage_error_before_the_run(tmp_path, option, where):
    # Tests run as root, whom permission bits do not stop: a parent that is a regular file, or
    # /proc (where nobody can create files), are unwritable for everyone.
    if where == "under-a-file":
        (tmp_path / "a-file").write_text("")
        path = tmp_path / "a-file" / "reports" / "out"
    else:
        path = Path("/proc/conformance-reports/out")
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--conformance-backend=neuron",
    ]
    command += ["--conformance-profile=quick", f"{option}={path}"]
    command += ["--pyargs", "conformance.test_capabilities"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 4, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert f"ERROR: {option}={path}: cannot write the report there" in completed.stderr
    assert "pass a path in a writable directory" in completed.stderr
    assert "Traceback" not in completed.stdout + completed.stderr
    assert " passed" not in completed.stdout  # nothing ran


INTERRUPT_PLUGIN = """
import os
import signal

started = []
# A run started in the background by a non-interactive shell inherits SIGINT ignored (and Python
# then keeps it so): restore the default, as a terminal's run has it.
signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_runtest_setup(item):
    # Ctrl-C, for real, as the third test (of this process) starts: the first ones have their
    # results. A terminal sends it to the whole process group: the xdist workers too.
    started.append(item.nodeid)
    if len(started) == 3:
        if os.environ.get("CTRL_C_TO_THE_GROUP"):
            os.killpg(os.getpgid(0), signal.SIGINT)
        else:
            os.kill(os.getpid(), signal.SIGINT)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_an_interrupted_run_writes_the_results_so_far_marked_incomplete(tmp_path, capsys, workers):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "ctrl_c_on_the_third_test.py").write_text(INTERRUPT_PLUGIN)
    markdown = tmp_path / "run.md"
    xdist = ["-n", str(workers)] if workers else []
    completed, run = run_suite(
        tmp_path,
        "capabilities",
        *xdist,
        "-p",
        "ctrl_c_on_the_third_test",
        f"--conformance-markdown={markdown}",
        site=plugins,
        # its own process group, so that the signal reaches the run and nothing else
        start_new_session=True,
        cwd=tmp_path,
    )
    output = completed.stdout[-3000:] + completed.stderr[-2000:]
    assert completed.returncode == 2, output  # pytest's INTERRUPTED
    assert run["complete"] is False and run["interrupted"] is True, output
    ran = len(run["results"])
    assert ran == 2 if not workers else 1 <= ran < 20, output
    # Only the tests that ran to the end: one the interrupt killed (with its worker) did not fail.
    assert all(r["outcome"] == "passed" for r in run["results"]), output
    assert "the report is incomplete" in completed.stdout
    assert "incomplete (interrupted)" in markdown.read_text()
    # conformance-report reads it and says so.
    assert report.main([str(tmp_path / "run.json")]) == 0
    table = capsys.readouterr().out
    assert f"| **total** | {ran} tests, 0 failing, incomplete |" in table
    assert "incomplete (interrupted)" in table


def test_a_complete_run_is_marked_complete(tmp_path):
    completed, run = run_suite(tmp_path, "capabilities")
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert run["complete"] is True and run["interrupted"] is False
    assert "incomplete" not in report.matrix([run])
