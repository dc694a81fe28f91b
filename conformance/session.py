"""A run of the suite: the backend, the manifest, the hypothesis profile, the results and the
reports; the fixtures every test uses. conformance.plugin starts it (:func:`start`) only in a
pytest run that asks for the suite."""

from __future__ import annotations

import dataclasses
import faulthandler
import platform
import re
import sys
import tempfile
from pathlib import Path

import hypothesis
import pytest
import torch
from hypothesis import HealthCheck

from . import manifest as manifests
from .backend import Backend, check_device_type, default_backend_name, torch_version
from .patched import applied_patches
from .plugin import (
    _PACKAGE,
    PROFILES,
    _is_conformance_item,
    _module_file,
    area_of,
    check_report_path,
    conformance_nodeid,
)
from .report import (
    Result,
    failure_groups,
    split_dispatcher_dump,
    torch_fault_groups,
    write_json,
    write_markdown,
)
from .torch_faults import find as find_torch_fault


def _profile_name(profile: str) -> str:
    return f"conformance-{profile}"


for _name, (_examples, _timeout) in PROFILES.items():
    hypothesis.settings.register_profile(
        _profile_name(_name),
        max_examples=_examples,
        deadline=None,  # device warm-up makes first calls slow; timeouts guard hangs instead
        derandomize=False,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


class ConformanceSession:
    """One run: the backends, the manifest, the results; registered as a pytest plugin."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        directory = config.getoption("conformance_manifest_dir")
        manifest_dir = Path(directory) if directory else None
        name = config.getoption("conformance_backend") or default_backend_name()
        reference = config.getoption("conformance_reference")
        self.probed = config.getoption("conformance_capabilities") == "probed"
        try:  # a typo ("opnereg") is not a backend without a manifest
            check_device_type(name)
        except RuntimeError as error:
            raise manifests.ManifestError(str(error)) from error
        if self.probed:
            from .probes import probe

            try:
                Backend(name, manifests.load("cpu")).check_usable()
            except RuntimeError as error:  # nothing to probe: the same usage error as --backend
                raise pytest.UsageError(str(error)) from error
            self.backend = Backend(name, probe(name).manifest())
        else:
            self.backend = Backend(name, manifests.load(name, manifest_dir))
        self.reference = Backend(reference, manifests.load(reference, manifest_dir))
        self.profile = config.getoption("conformance_profile")
        self.patches = applied_patches()
        self.label = config.getoption("conformance_label") or name
        self.strict_torch = bool(config.getoption("conformance_strict_torch"))
        self.results: dict[str, Result] = {}
        self.stale_known_failures: list[manifests.KnownFailure] = []
        self.is_worker = hasattr(config, "workerinput")
        self._ids: dict[str, str] = {}  # pytest's node id -> the stable id, from the reports
        self.died_in: set[str] = set()  # tests whose xdist worker died in them
        self.interrupted = False  # Ctrl-C: the results are the ones so far
        self.stopped_early = False  # -x, --maxfail: the same, on purpose

    def header(self) -> list[str]:
        seed = self.config.getoption("hypothesis_seed", None)
        return [
            f"conformance: backend={self.backend.name} devices={self._device_count()} "
            f"reference={self.reference.name} torch={torch.__version__} "
            f"profile={self.profile} seed={seed if seed is not None else 'random'}",
            f"conformance: torch is {self._torch_state()}",
            f"conformance: manifest={self.backend.manifest.source} "
            f"known failures={len(self.backend.manifest.known_failures)}",
            *(
                [
                    "conformance: capabilities PROBED, NOT DECLARED: "
                    + _describe(self.backend.capabilities)
                ]
                if self.probed
                else []
            ),
        ]

    def _torch_state(self) -> str:
        if not self.patches:
            return "stock (no device-agnostic patches applied)"
        return f"patched ({len(self.patches)} patches of the device-agnostic series)"

    def _device_count(self) -> str:
        try:
            return str(self.backend.device_count)
        except Exception as error:
            return f"unavailable ({error})"

    # ---- collection: timeouts, known failures, stale manifest entries ----

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        conformance_items = [item for item in items if _is_conformance_item(item)]
        if not conformance_items:
            return
        self.backend.check_usable()
        # @given reads its settings when the module is imported, and importing
        # torch.testing._internal (as OpInfo-based areas do) loads PyTorch's own profile: apply
        # ours to every property-based test explicitly, as @settings above @given would.
        profile = hypothesis.settings.get_profile(_profile_name(self.profile))
        hypothesis.settings.load_profile(_profile_name(self.profile))
        decorated: set[int] = set()  # parametrized items share one function
        for item in conformance_items:
            function = getattr(item, "obj", None)
            if getattr(function, "is_hypothesis_test", False) and id(function) not in decorated:
                decorated.add(id(function))
                hypothesis.settings(profile)(function)
        timeout = PROFILES[self.profile][1]
        explicit_timeout = config.getoption("timeout", None) is not None  # pytest-timeout's
        for item in conformance_items:
            if not explicit_timeout and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(timeout))
            known = self.backend.manifest.known_failure(conformance_nodeid(item))
            if known is not None:
                if known.fixed_in(self.patches):
                    continue  # the applied series fixes it: it must pass now
                reason = f"known failure: {known.reason} ({known.link})"
                item.add_marker(pytest.mark.xfail(strict=True, reason=reason))

    # ---- results ----

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        # The stable id travels on the report: with xdist the controller sees only reports.
        report = yield
        nodeid = conformance_nodeid(item)
        if nodeid is not None:
            report.conformance_nodeid = nodeid
            if report.failed and call.excinfo is not None:
                report.conformance_failure = _failure(call.excinfo, str(report.longrepr))
                if _is_timeout(call.excinfo):
                    report.conformance_timeout = self._timeout_note(item)
                elif report.when == "call" and not hasattr(report, "wasxfail"):
                    self._attribute_to_torch(nodeid, item, report)
        return report

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # On an xdist worker: a crash (a segfault in a kernel) writes its signal and the stack
        # of the crashing thread where the controller finds it (_crash_failure); after every
        # configure hook, so that pytest's own faulthandler setup does not replace it.
        workerinput = getattr(self.config, "workerinput", None)
        if workerinput is not None:
            self._crash_log = open(_crash_file(workerinput), "a")
            faulthandler.enable(file=self._crash_log, all_threads=False)

    def _timeout_note(self, item: pytest.Item) -> str:
        """What a timeout is, and the option that raises it."""
        marker = item.get_closest_marker("timeout")
        limit = self.config.getoption("timeout", None) or (marker.args[0] if marker else "?")
        return (
            f"timeout, not a semantic failure: the test ran past {limit} s (the {self.profile} "
            "profile's limit, or --timeout). On a busy machine raise it with --timeout=SECONDS "
            "(pytest-timeout; `conformance ... -- --timeout=SECONDS`) or run fewer workers."
        )

    def _attribute_to_torch(
        self, nodeid: str, item: pytest.Item, report: pytest.TestReport
    ) -> None:
        """A failure that torch's own CUDA assumptions cause is torch's: labelled, and (unless
        --conformance-strict-torch) an expected failure rather than the backend's."""
        failure = report.conformance_failure
        text = f"{failure['error']}\n{failure['detail']}\n{report.longrepr}"
        fault = find_torch_fault(nodeid, text, self.patches)
        if fault is None:
            return
        report.conformance_torch_fault = fault.describe()
        # --junitxml writes the test's properties from its teardown report, made from the item's.
        item.user_properties.append(("conformance_torch_fault", fault.label()))
        if not self.strict_torch:
            report.outcome = "skipped"
            report.wasxfail = fault.describe()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = getattr(report, "conformance_nodeid", None)
        if nodeid is not None:
            self._ids[report.nodeid] = nodeid
        else:
            # A report without one was made up by xdist for a worker that died in this test
            # (a crash, or Ctrl-C): after the test's setup report, or from a path under the
            # rootdir.
            nodeid = self._ids.get(report.nodeid) or self._id_under_rootdir(report.nodeid)
            if nodeid is None:
                return
            self.died_in.add(nodeid)
            if report.failed:
                report.conformance_failure = _crash_failure(report)
        outcome = _outcome(report)
        if outcome is None:
            return
        previous = self.results.get(nodeid)
        if previous is not None and previous.outcome in ("failed", "error", "timeout"):
            return  # a passing teardown must not hide a failed call
        detail = ""
        failure = getattr(report, "conformance_failure", None) or {}
        if failure:
            detail = failure["detail"]
        elif report.failed and report.longrepr is not None:
            detail = str(report.longrepr)[-4000:]
        elif hasattr(report, "wasxfail"):
            detail = report.wasxfail
        elif report.skipped and isinstance(report.longrepr, tuple):
            detail = str(report.longrepr[2]).removeprefix("Skipped: ")  # why not applicable
        self.results[nodeid] = Result(
            nodeid=nodeid,
            area=area_of(nodeid),
            outcome=outcome,
            detail=detail,
            error=failure.get("error", ""),
            where=failure.get("where", ""),
            dispatcher_dump=failure.get("dispatcher_dump", ""),
            torch_fault=getattr(report, "conformance_torch_fault", ""),
            timeout=getattr(report, "conformance_timeout", ""),
        )

    def _stale_entries(self) -> list[manifests.KnownFailure]:
        """Known failures that matched no test that ran: their module is gone, or their module
        ran (with no -k/-m filter) and none of its tests is theirs. Found from the results, so
        in every mode: the xdist controller collects nothing itself."""
        filtered = bool(self.config.getoption("keyword") or self.config.getoption("markexpr"))
        ran = {_module_file(nodeid) for nodeid in self.results}
        stale = []
        for entry in self.backend.manifest.known_failures:
            if any(entry.matches(nodeid) for nodeid in self.results):
                continue
            module = _module_file(entry.test)
            if not (_PACKAGE / module).exists() or (module in ran and not filtered):
                stale.append(entry)
        return stale

    def _stale_hint(self, entry: manifests.KnownFailure) -> str:
        """Why an entry matches nothing, when the reason is plain: a parametrized test named
        without its [param]."""
        variants = sorted(
            n.split("::", 1)[1]
            for n in self.results
            if "[" in n and n.split("[", 1)[0].endswith("::" + entry.test.split("::")[-1])
        )
        if not variants:
            return ""
        shown = ", ".join(variants[:3]) + (", ..." if len(variants) > 3 else "")
        return f"; the test is parametrized: name each variant with its [param] ({shown})"

    def _id_under_rootdir(self, nodeid: str) -> str | None:
        path = (self.config.rootpath / nodeid.split("::", 1)[0]).resolve()
        if path.parent != _PACKAGE or not path.name.startswith("test_") or "::" not in nodeid:
            return None
        return f"{_PACKAGE.name}/{path.name}::{nodeid.split('::', 1)[1]}"

    def run_record(self) -> dict:
        return {
            "complete": not (self.interrupted or self.stopped_early),
            "interrupted": self.interrupted,
            "label": self.label,
            "backend": self.backend.name,
            "reference": self.reference.name,
            "torch": torch.__version__,
            "torch_version": list(torch_version()),
            "python": platform.python_version(),
            "profile": self.profile,
            "patches": list(self.patches),
            # "probed": nobody declared these capabilities (--capabilities=probed)
            "capabilities": "probed" if self.probed else "declared",
            "declared_capabilities": _describe(self.backend.capabilities),
            "strict_torch": self.strict_torch,
            "stale_known_failures": [
                {**dataclasses.asdict(e), "hint": self._stale_hint(e).removeprefix("; ")}
                for e in self.stale_known_failures
            ],
            "results": [dataclasses.asdict(r) for r in self.results.values()],
        }

    @pytest.hookimpl(tryfirst=True)  # before --junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker or not self.results:
            return
        self.interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        self.stopped_early = bool(session.shouldfail or session.shouldstop)
        if self.interrupted:  # Ctrl-C killed the workers in these tests: they did not fail
            for nodeid in self.died_in:
                self.results.pop(nodeid, None)
        if not self.interrupted and not self.stopped_early:
            self.stale_known_failures = self._stale_entries()
        if self.stale_known_failures:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        xml = self.config.stash.get(_JUNIT_KEY, None) if _JUNIT_KEY is not None else None
        if xml is not None:  # pytest's --junitxml: the torch faults counted apart
            torch_faults = sum(bool(r.torch_fault) for r in self.results.values())
            xml.add_global_property("conformance_torch_faults", str(torch_faults))
            xml.add_global_property("conformance_backend", self.backend.name)
        run = self.run_record()
        if self.config.getoption("conformance_json"):
            write_json(Path(self.config.getoption("conformance_json")), run)
        if self.config.getoption("conformance_markdown"):
            write_markdown(Path(self.config.getoption("conformance_markdown")), [run])

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.is_worker or not self.results:
            return
        terminalreporter.section("conformance")
        if self.interrupted or self.stopped_early:
            why = "the run was interrupted" if self.interrupted else "the run stopped early"
            terminalreporter.write_line(
                f"INCOMPLETE: {why}; the report is incomplete, with the results of the "
                f"{len(self.results)} tests that ran",
                yellow=True,
            )
        for entry in self.stale_known_failures:
            terminalreporter.write_line(
                f"STALE MANIFEST ENTRY: {entry.test!r} matches no test "
                f"({self.backend.manifest.source}){self._stale_hint(entry)}",
                red=True,
            )
        counts: dict[str, dict[str, int]] = {}
        for result in self.results.values():
            area = counts.setdefault(result.area, {})
            area[result.outcome] = area.get(result.outcome, 0) + 1
        if self.probed:
            terminalreporter.write_line(
                "capabilities PROBED, NOT DECLARED (no manifest): "
                + _describe(self.backend.capabilities),
                yellow=True,
            )
        for area in sorted(counts):
            summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts[area].items()))
            terminalreporter.write_line(f"{self.label:>10}  {area:<22} {summary}")
        results = [dataclasses.asdict(r) for r in self.results.values()]
        faults = torch_fault_groups(results)
        if faults:
            count = sum(len(members) for _, members in faults)
            strict = "" if self.strict_torch else "; they do not fail the run"
            terminalreporter.write_line(
                f"torch's own faults: {count} tests fail for a CUDA assumption in torch, not "
                f"{self.backend.name}'s (conformance/torch_faults.toml{strict}; "
                "--conformance-strict-torch to fail on them)",
                yellow=True,
            )
            for label, members in faults:
                why = members[0]["torch_fault"].split(": ", 1)[-1]
                why = why if len(why) < 160 else why[:157] + "..."
                terminalreporter.write_line(f"  {len(members):>4} x {label}: {why}", yellow=True)
                shown = ", ".join(m["nodeid"].split("conformance/", 1)[-1] for m in members[:3])
                more = f", and {len(members) - 3} more" if len(members) > 3 else ""
                terminalreporter.write_line(f"         {shown}{more}")
        timeouts = [r for r in results if r["outcome"] == "timeout"]
        if timeouts:
            terminalreporter.write_line(
                f"timeouts: {len(timeouts)} tests ({timeouts[0]['timeout']})", red=True
            )
            shown = ", ".join(t["nodeid"].split("conformance/", 1)[-1] for t in timeouts[:3])
            more = f", and {len(timeouts) - 3} more" if len(timeouts) > 3 else ""
            terminalreporter.write_line(f"         {shown}{more}")
        groups = failure_groups(results, self.backend.name)
        if groups:
            failing = sum(len(members) for _, members in groups)
            terminalreporter.write_line(
                f"failures by root cause: {failing} in {len(groups)} causes"
            )
            for _, members in groups:
                where = members[0]["where"]
                error = members[0]["error"] or members[0]["detail"].strip().splitlines()[-1]
                folded = next((m["dispatcher_dump"] for m in members if m["dispatcher_dump"]), "")
                note = (
                    f" [dispatcher dump, {len(folded.splitlines())} lines, folded]"
                    if folded
                    else ""
                )
                terminalreporter.write_line(
                    f"  {len(members):>4} x {error}" + (f"  (in {where})" if where else "") + note,
                    red=True,
                )
                shown = ", ".join(m["nodeid"].split("conformance/", 1)[-1] for m in members[:3])
                more = f", and {len(members) - 3} more" if len(members) > 3 else ""
                terminalreporter.write_line(f"         {shown}{more}")


_SESSION_KEY = pytest.StashKey[ConformanceSession]()
try:  # pytest's --junitxml writer, to count the torch faults in the XML's properties
    from _pytest.junitxml import xml_key as _JUNIT_KEY
except ImportError:  # pragma: no cover - a pytest without it: the per-test properties remain
    _JUNIT_KEY = None


def _describe(capabilities: manifests.Capabilities) -> str:
    dtypes = ",".join(sorted(str(d).removeprefix("torch.") for d in capabilities.dtypes))
    flags = [flag for flag in manifests.CAPABILITY_FLAGS if getattr(capabilities, flag)]
    autocast = ",".join(sorted(str(d).removeprefix("torch.") for d in capabilities.autocast_dtypes))
    return f"dtypes={dtypes} autocast={autocast or '-'} {' '.join(flags) or '(no flags)'}"


def _failure(excinfo: pytest.ExceptionInfo, longrepr: str) -> dict[str, str]:
    """A failure's root cause (first line of the error, the callable that raised it) and its
    detail: the exception first when the backend (or torch) raised it, not an assertion of the
    suite, with the dispatcher's kernel listing cut out (reports fold it)."""
    error = excinfo.value
    while isinstance(error, BaseExceptionGroup) and error.exceptions:  # hypothesis, several bugs
        error = error.exceptions[0]
    message = str(error).strip()
    message, dump = split_dispatcher_dump(message)
    first = (message.strip().splitlines() or [""])[0]
    text, dump_in_repr = split_dispatcher_dump(longrepr)
    dump = dump or dump_in_repr
    where = _frame_that_matters(excinfo)
    name = type(error).__name__
    detail = text[-4000:]
    if not isinstance(error, AssertionError):  # the backend's own exception: it comes first
        detail = f"{name}: {message.strip()}\n\n--- traceback ---\n{text[-3000:]}"
    return {
        "error": f"{name}: {first}"[:300],
        "where": where,
        "detail": detail,
        "dispatcher_dump": dump,
    }


# Frames that never say where a failure is: pytest's, hypothesis', the suite's helpers (its
# modules other than test_*.py), code compiled from strings and lambdas (the ops of a table).
_PLUMBING = ("_pytest", "pluggy", "hypothesis", "xdist", "pytest_timeout", "contextlib.py")


def _frame_that_matters(excinfo: pytest.ExceptionInfo) -> str:
    """ "file.py::function" of the innermost frame outside pytest, hypothesis and the suite's
    helpers: the test that judged (for the suite's assertions), or the code of torch or of the
    backend that raised; "" if there is none."""
    for entry in reversed(excinfo.traceback):
        path = Path(str(entry.path))
        if entry.name == "<lambda>" or str(path).startswith("<") or not path.suffix:
            continue
        if any(part in _PLUMBING for part in path.parts):
            continue
        if path.parent.resolve() == _PACKAGE and not path.name.startswith("test_"):
            continue
        return f"{path.name}::{entry.name}"
    return ""


def _session(config: pytest.Config) -> ConformanceSession:
    return config.stash[_SESSION_KEY]


def start(config: pytest.Config) -> None:
    """Start the run of the suite (conformance.plugin calls it from pytest_configure): a usage
    error (exit 4) for a backend that cannot be judged or a report path that cannot be written."""
    try:
        state = ConformanceSession(config)
    except manifests.ManifestError as error:
        raise pytest.UsageError(str(error)) from error
    if not state.is_worker:
        for option in ("conformance_json", "conformance_markdown"):
            if config.getoption(option):
                check_report_path("--" + option.replace("_", "-"), config.getoption(option))
        if getattr(config.option, "xmlpath", None):  # pytest's own report, lost as late
            check_report_path("--junitxml", config.option.xmlpath)
    config.stash[_SESSION_KEY] = state
    config.pluginmanager.register(state, "conformance-session")
    # This module's fixtures (backend, reference, device) and its report header.
    config.pluginmanager.register(sys.modules[__name__], "conformance-fixtures")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return _session(config).header() if _SESSION_KEY in config.stash else []


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> Backend:
    """The backend under test."""
    return _session(request.config).backend


@pytest.fixture(scope="session")
def reference(request: pytest.FixtureRequest) -> Backend:
    """The reference backend (the CPU unless --reference says otherwise)."""
    return _session(request.config).reference


@pytest.fixture(scope="session")
def device(backend: Backend) -> torch.device:
    """The backend's first device."""
    return backend.device(0)


@pytest.fixture(autouse=True)
def _conformance_test_setup(request: pytest.FixtureRequest) -> None:
    """For conformance tests: our hypothesis profile (PyTorch's test utilities load their own
    when imported), a fixed torch seed, and the current device restored afterwards."""
    if not _is_conformance_item(request.node):
        yield
        return
    state = _session(request.config)
    hypothesis.settings.load_profile(_profile_name(state.profile))
    torch.manual_seed(0)
    accelerator = getattr(torch, "accelerator", None)
    previous = None
    if not state.backend.is_cpu and accelerator is not None:
        previous = accelerator.current_device_index()
    try:
        yield
    finally:
        if previous is not None:
            accelerator.set_device_index(previous)


def _crash_file(workerinput: dict) -> Path:
    """Where a worker's fault handler writes (one file per run and worker id, appended: xdist
    gives the worker that replaces a crashed one the same id)."""
    name = f"conformance-crash-{workerinput['testrunuid']}-{workerinput['workerid']}.txt"
    return Path(tempfile.gettempdir()) / name


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line \d+ in (?P<name>\S+)')


def _crash_failure(report: pytest.TestReport) -> dict[str, str]:
    """xdist's report of a worker that died in a test, with the signal and the stack that the
    worker's fault handler wrote (when it could: a SIGKILL leaves nothing)."""
    message = str(report.longrepr).strip().splitlines()[-1] if report.longrepr else "crashed"
    node = getattr(report, "node", None)
    text = ""
    workerinput = getattr(node, "workerinput", None)
    if workerinput is not None:
        try:
            text = _crash_file(workerinput).read_text(errors="replace")
        except OSError:
            text = ""
    start = text.rfind("Fatal Python error: ")
    if start < 0:
        return {
            "error": f"{message} (no fault handler report: killed, or exited)",
            "where": "",
            "detail": str(report.longrepr)[-4000:],
            "dispatcher_dump": "",
        }
    crash = text[start:].split("\nExtension modules:", 1)[0].strip()
    what = crash.splitlines()[0].removeprefix("Fatal Python error: ").strip()
    frames = _FRAME.findall(crash)
    where = f"{Path(frames[0][0]).name}::{frames[0][1]}" if frames else ""
    return {
        "error": f"{message} ({what})",
        "where": where,
        "detail": f"{crash[:6000]}\n\n--- xdist ---\n{str(report.longrepr)[-2000:]}",
        "dispatcher_dump": "",
    }


def _is_timeout(excinfo: pytest.ExceptionInfo) -> bool:
    """pytest-timeout's failure ("Failed: Timeout >120.0s"), or a fixture's own timeout that
    says so the same way."""
    return excinfo.typename == "Failed" and str(excinfo.value).startswith("Timeout")


def _outcome(report: pytest.TestReport) -> str | None:
    if getattr(report, "conformance_timeout", "") and report.failed:
        return "timeout"
    if report.when == "call" or report.outcome != "passed":
        if getattr(report, "conformance_torch_fault", "") and report.skipped:
            return "torch fault"
        if hasattr(report, "wasxfail"):
            return "known" if report.skipped else "failed"  # strict XPASS is a failure
        if report.skipped:
            return "not applicable"
        if report.failed:
            return "failed" if report.when == "call" else "error"
        if report.when == "call":
            return "passed"
    return None
