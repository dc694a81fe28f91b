"""``verify``: prove each patch of the series: its tests fail on stock torch and pass with the
series applied, on neuron and without it (on the CPU, where a test names a mock or a device
upstream CI runs), and every file it touches is clean under PyTorch's own ruff settings.

The installed torch is never modified. A scratch "shadow" torch is built in a temporary folder:
every ``torch/**/*.py`` of the installed package is copied, everything else (``lib/``,
``include/``, ``_C*.so``, ...) is a symlink to the installed file, so ``PYTHONPATH=<tmp>`` imports
the shadow's Python code with the one set of native libraries. The series is overlaid on the shadow
(the overlay machinery, with its tests folder ``<tmp>/test``); each patch's test files (the
``test/*.py`` files it adds, which call ``run_tests()``) then run as ``python FILE`` would run
them, in a fork of a warm interpreter of each configuration (tools/patchqueue/testrun.py;
``fresh=True`` starts ``python FILE`` itself):

- stock on neuron: no PYTHONPATH; the tests must FAIL (tests ran, some failed or errored);
- patched on neuron: ``PYTHONPATH=<tmp>``; the tests must PASS (at least one not skipped);
- without neuron (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``: the CPU-only torch upstream's CPU jobs
  run), stock: some test of the patch must FAIL: upstream CI never runs neuron, so a patch is
  only mergeable with a test that fails before the fix on a device upstream CI has (the CPU
  here) or with a named mock of the trait (a device without float64, a device module without
  ``_initialized``, ...). The failing tests are listed, so a reviewer sees which mock or device;
- without neuron, patched: every test must pass (CPU green);
- lint (tools/patchqueue/lint.py): every ``.py`` file the patch touches, after the series, passes
  PyTorch's ruff format and ruff check settings.

A patch is "proven" when all of these hold; "unproven" when it adds no test or its tests do not
fail before the fix (on neuron, or without it); "failed" otherwise. Nothing here imports torch
or the neuron backend: torch runs only in subprocesses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput, PatchQueueError
from tools.patchqueue.export import parse_message
from tools.patchqueue.lint import FileLint, lint_series
from tools.patchqueue.overlay import apply_overlay, load_state, series_record
from tools.patchqueue.series import Patch, Series
from tools.patchqueue.targets import InstalledTorch
from tools.patchqueue.testrun import Run, WarmRunners, failing_class, is_mock, run_test_file

DEFAULT_TIMEOUT = 300.0
# Run in the shadow's interpreter: where torch comes from, whether neuron loaded, and which
# libtorch files are mapped (one each, the installed ones, or two copies are loaded).
_PROBE = """
import json, torch
maps = set()
with open("/proc/self/maps") as f:
    for line in f:
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if "/libtorch" in path or "/libc10" in path:
            maps.add(path)
print(json.dumps({
    "torch": torch.__file__,
    "backend": torch._C._get_privateuse1_backend_name(),
    "neuron": hasattr(torch, "neuron") and torch.neuron.is_available(),
    "libs": sorted(maps),
}))
"""


def installed_torch(python: str = sys.executable) -> InstalledTorch:
    """The torch package ``python`` imports with no PYTHONPATH (found without importing it)."""
    code = "import importlib.util as u; s = u.find_spec('torch'); print(s.origin if s else '')"
    env = _env(pythonpath=None)
    out = subprocess.run(
        [python, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    origin = out.stdout.strip()
    if out.returncode != 0 or not origin:
        raise BadInput(f"{python}: cannot find an installed torch ({out.stderr.strip()})")
    return InstalledTorch(Path(origin).parent)


def refuse_overlaid(real: InstalledTorch) -> None:
    """BadInput when the installed torch carries an overlay record (applied, or an apply or
    revert that was killed): a shadow or a stock run of it would not be stock torch."""
    if real.state_dir.exists() or real.state_dir.with_name(real.state_dir.name + ".new").exists():
        raise BadInput(
            f"{real.torch_dir}: a series is applied to the installed torch (or an apply or revert "
            f"of it was interrupted): stock runs would not be stock; `scripts/patches status "
            f"{real.torch_dir}` recovers an interrupted one; `scripts/patches revert` an applied "
            "one"
        )


def _env(pythonpath: str | None, autoload: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    # Under CI=true, torch.testing._internal's run_tests switches to PyTorch's own CI mode
    # (XML reports through xmlrunner, disabled-test lists): the patches' tests must run plainly.
    for variable in ("CI", "IN_CI", "PYTORCH_TEST_WITH_SLOW", "CONTINUE_THROUGH_ERROR"):
        env.pop(variable, None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    if autoload:
        env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    else:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    if pythonpath is None:  # stock: never write __pycache__ into the installed torch
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:  # the shadow keeps its own bytecode (its folders are real folders)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def build_shadow(
    real: Path, root: Path, rewritten: Iterable[str] = (), bytecode: bool = True
) -> Path:
    """Make ``root/torch``: copies of every ``.py`` of ``real``, symlinks to everything else.

    A folder holding no ``.py`` file anywhere below it is one symlink. The bytecode pip compiled
    at install (``__pycache__``) is copied too, where Python checks it against its source
    (``_revalidated_bytecode``): without it every interpreter importing the shadow under
    ``PYTHONDONTWRITEBYTECODE=1`` compiles torch's 2,000+ files again (about 5 s). The files in
    ``rewritten`` (paths like ``torch/amp/grad_scaler.py``: what a series will write) get no
    bytecode: a rewrite within the second of the original's mtime, with the same size, would
    otherwise pass the check. ``bytecode=False`` copies none. Returns ``root/torch``.
    """
    rewritten = list(rewritten)
    real = real.resolve()
    has_py: set[Path] = set()
    for folder, dirs, files in os.walk(real):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if any(name.endswith(".py") for name in files):
            path = Path(folder)
            while path not in has_py and path != real.parent:
                has_py.add(path)
                path = path.parent
    shadow = root / "torch"
    for folder, dirs, files in os.walk(real):
        src = Path(folder)
        dest = shadow / src.relative_to(real)
        dest.mkdir(parents=True, exist_ok=True)
        keep = []
        for name in dirs:
            if name == "__pycache__":
                if not bytecode:
                    continue
                here = str(src.relative_to(real.parent))
                skip = {Path(p).stem for p in rewritten if str(Path(p).parent) == here}
                _copy_bytecode(src / name, dest / name, skip)
                continue
            if src / name in has_py and not (src / name).is_symlink():
                keep.append(name)
            else:
                os.symlink(src / name, dest / name)
        dirs[:] = keep
        for name in files:
            if name.endswith(".py") and not (src / name).is_symlink():
                shutil.copy2(src / name, dest / name)
            else:
                os.symlink(src / name, dest / name)
    return shadow


def _revalidated_bytecode(pyc: Path) -> bool:
    """Whether Python checks ``pyc`` against its source before using it: the flags word of the
    header (PEP 552) is 0 (source mtime and size) or 3 (checked source hash), not 1 (unchecked
    hash, which a patched source would not invalidate)."""
    try:
        with pyc.open("rb") as f:
            header = f.read(8)
    except OSError:
        return False
    return len(header) == 8 and int.from_bytes(header[4:8], "little") in (0, 3)


def _copy_bytecode(src: Path, dest: Path, skip: set[str]) -> None:
    if src.is_symlink() or not src.is_dir():
        return
    for pyc in src.glob("*.pyc"):
        if pyc.name.split(".", 1)[0] in skip:
            continue
        if pyc.is_file() and not pyc.is_symlink() and _revalidated_bytecode(pyc):
            dest.mkdir(exist_ok=True)
            shutil.copy2(pyc, dest / pyc.name)


def _check_inside(written: Iterable[str], target: InstalledTorch, root: Path) -> None:
    """Refuse unless every file the overlay writes (``written``) is a real (copied) file of the
    shadow ``target``.

    A write through a symlink would change the installed torch.
    """
    real_root = root.resolve()
    for path in written:
        if target.scope(path) != "target":
            continue
        dest = target.dest(path)
        probe = dest if dest.exists() or dest.is_symlink() else dest.parent
        while not probe.exists() and not probe.is_symlink():
            probe = probe.parent
        if probe.is_symlink() or real_root not in probe.resolve().parents:
            raise BadInput(f"{path}: in the shadow torch this is a link to the installed torch")


def patched_shadow(
    series: Series,
    real: InstalledTorch,
    root: Path,
    python: str = sys.executable,
    backend: str = "neuron",
) -> dict:
    """Build a shadow of ``real`` in the empty folder ``root`` and overlay ``series`` on it.

    ``PYTHONPATH=root`` then imports the patched torch (with the installed native libraries);
    the patches' tests land in ``root/test``. Returns the probe of the shadow (where torch and
    its libraries came from). Raises BadInput when the shadow is unusable.
    """
    # The shadow holds the installed files: the plan made on them is the shadow's plan.
    written = list(plan_series(series, real.read, real.scope).files)
    build_shadow(real.torch_dir, root, rewritten=written)
    shadow = InstalledTorch(root / "torch")
    _check_inside(written, shadow, root)
    apply_overlay(series, shadow, root / "test")
    return probe_shadow(root, real, python, backend)


SHADOW_MARK = ".patched-shadow"


def ensure_patched_shadow(series: Series, real: InstalledTorch, root: Path) -> tuple[Path, bool]:
    """A patched shadow of ``real`` in ``root`` that carries exactly ``series``, for repeated use.

    ``root`` is made if it does not exist; one made here before is kept when its overlay record
    names the same patches (same bytes) and otherwise rebuilt. Any other existing folder is
    refused rather than deleted. Returns the resolved root and whether it was (re)built.
    """
    root = Path(root).resolve()
    real.check_base(series.base)
    refuse_overlaid(real)
    if root.exists():
        if not (root / SHADOW_MARK).is_file():
            raise BadInput(
                f"{root}: exists and was not made by `patches shadow`; give a new folder"
            )
        try:
            state = load_state(InstalledTorch(root / "torch"))
        except PatchQueueError:
            state = None  # a half-built or interrupted shadow: rebuild it
        if state is not None and state["series"] == series_record(series):
            return root, False
        shutil.rmtree(root)
    root.mkdir(parents=True)
    try:
        (root / SHADOW_MARK).write_text("made by `scripts/patches shadow`\n", encoding="utf-8")
        patched_shadow(series, real, root)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root, True


@dataclass
class TestResult:
    """The four runs of one test file, and its two OpenReg runs where there are."""

    file: str
    stock_neuron: Run
    patched_neuron: Run
    stock_cpu: Run
    patched_cpu: Run
    stock_openreg: Run | None = None
    patched_openreg: Run | None = None


# Every test file of a patch runs on OpenReg: the series' tests take their device from the
# process (a device-type test's PrivateUse1 variant, the current accelerator, the PrivateUse1
# backend's name, all "openreg" in OpenReg's interpreter) or need none, so OpenReg's process runs
# them as it is. A patch whose tests cannot run there says why in this trailer instead.
OPENREG_TRAILER = "OpenReg"
_NOT_APPLICABLE = "not applicable:"


def openreg_not_applicable(patch: Patch) -> str | None:
    """The reason of a patch's ``OpenReg: not applicable: <why>`` trailer, or None (its tests
    run on OpenReg). BadInput for an ``OpenReg:`` trailer of any other form."""
    values = parse_message(patch).values(OPENREG_TRAILER)
    if not values:
        return None
    value = values[0]
    why = value[len(_NOT_APPLICABLE) :].strip() if value.startswith(_NOT_APPLICABLE) else ""
    if len(values) > 1 or not why:
        raise BadInput(
            f"{patch.name}: the trailer {OPENREG_TRAILER}: {value!r} must be given once as "
            f"'{OPENREG_TRAILER}: {_NOT_APPLICABLE} <why its tests cannot run on OpenReg>'"
        )
    return why


def openreg_cell(tests: list[TestResult], not_applicable: str | None = None) -> str:
    """The "fails before on OpenReg" column: how the OpenReg runs went, or why there are none.

    A stock failure of ``...Mock`` classes only is shown as such, with the classes: it is the
    mock's failure, which fails on any build, not one of the OpenReg device."""
    if not_applicable is not None:
        return f"not applicable: {not_applicable}"
    runs = [(t.stock_openreg, t.patched_openreg) for t in tests if t.stock_openreg is not None]
    if not runs:
        return "-"
    failing = [name for stock, _ in runs for name in stock.failing]  # type: ignore[union-attr]
    fails = all(stock.outcome == "failed" for stock, _ in runs)  # type: ignore[union-attr]
    passes = all(p is not None and p.outcome == "passed" for _, p in runs)
    if not fails:
        before = "no: " + "; ".join(s.summary for s, _ in runs)  # type: ignore[union-attr]
    elif failing and all(is_mock(name) for name in failing):
        classes = ", ".join(sorted({failing_class(name) for name in failing}))
        before = f"mocks only ({len(failing)}): {classes}"
    else:
        before = f"fails ({len(failing)})"
    return before + (", passes after" if passes else ", NOT passing after")


@dataclass
class PatchVerdict:
    """One patch: its test files, their runs, the lint of its files and the verdict."""

    patch: str
    subject: str
    verdict: str = "unproven"
    reasons: list[str] = field(default_factory=list)
    tests: list[TestResult] = field(default_factory=list)
    lint: list[FileLint] = field(default_factory=list)
    openreg_not_applicable: str | None = None  # the reason its tests do not run on OpenReg

    def without_neuron_failures(self) -> list[str]:
        """The tests that fail on stock torch without neuron: the CI-device or mock proof."""
        return [name for t in self.tests for name in t.stock_cpu.failing]

    def cells(self) -> tuple[str, ...]:
        """The table's columns after the patch's name (see Report.table)."""
        if not self.tests:
            openreg = openreg_cell([], self.openreg_not_applicable)
            return "-", "-", "-", openreg, "-", self._lint_cell(), self.verdict
        stock = "; ".join(t.stock_neuron.summary for t in self.tests)
        patched = "; ".join(t.patched_neuron.summary for t in self.tests)
        failing = self.without_neuron_failures()
        if failing:
            classes = sorted({failing_class(name) for name in failing})
            ci = f"fails ({len(failing)}): " + ", ".join(classes)
        else:
            ci = "no: " + "; ".join(t.stock_cpu.summary for t in self.tests)
        cpu_ok = all(t.patched_cpu.outcome == "passed" for t in self.tests)
        cpu = "pass" if cpu_ok else "; ".join(t.patched_cpu.summary for t in self.tests)
        openreg = openreg_cell(self.tests, self.openreg_not_applicable)
        return stock, patched, ci, openreg, cpu, self._lint_cell(), self.verdict

    def _lint_cell(self) -> str:
        dirty = [f.path for f in self.lint if not f.clean]
        return "clean" if not dirty else "dirty: " + ", ".join(dirty)


def _judge(verdict: PatchVerdict) -> None:
    if not verdict.tests:
        verdict.verdict = "unproven"
        verdict.reasons.append("the patch adds no test file under test/")
        return
    reasons = []
    unproven = False
    for t in verdict.tests:
        if t.stock_neuron.outcome != "failed":
            unproven = True
            reasons.append(f"{t.file}: does not fail on stock torch ({t.stock_neuron.summary})")
        run = t.patched_neuron
        if run.outcome != "passed" or run.ran - run.skipped <= 0:
            reasons.append(f"{t.file}: does not pass with the series ({run.summary})")
        cpu = t.patched_cpu
        if cpu.outcome != "passed":
            reasons.append(f"{t.file}: fails on the CPU with the series ({cpu.summary})")
        elif t.stock_cpu.outcome not in ("passed", "failed"):
            reasons.append(f"{t.file}: no result on the CPU before ({t.stock_cpu.summary})")
    if not verdict.without_neuron_failures():
        unproven = True
        reasons.append(
            "no test fails on stock torch without the neuron backend: add one that fails before "
            "the fix on a device upstream CI runs (the CPU) or with a named mock of the trait"
        )
    for t in verdict.tests:
        if t.stock_openreg is None or t.patched_openreg is None:
            continue
        if t.stock_openreg.outcome != "failed":
            reasons.append(
                f"{t.file}: does not fail before on OpenReg ({t.stock_openreg.summary}); a test "
                f"that cannot run there: say why in an `{OPENREG_TRAILER}: {_NOT_APPLICABLE} "
                "<why>` trailer"
            )
        if t.patched_openreg.outcome != "passed":
            reasons.append(f"{t.file}: does not pass on OpenReg with the series "
                           f"({t.patched_openreg.summary})")  # fmt: skip
    for lint in verdict.lint:
        if not lint.clean:
            reasons.append(f"lint: {lint.describe()}")
    verdict.reasons = reasons
    verdict.verdict = "unproven" if unproven else ("failed" if reasons else "proven")


def _test_files(patch: Patch) -> list[str]:
    return [
        f.path
        for f in patch.files
        if f.status == "added" and f.path.startswith("test/") and f.path.endswith(".py")
    ]


def probe_shadow(
    root: Path, real: InstalledTorch, python: str = sys.executable, backend: str = "neuron"
) -> dict:
    """Check the shadow imports from ``root`` (with ``python``) with its PrivateUse1 backend
    (``backend``) and one copy of the installed libtorch."""
    proc = subprocess.run(
        [python, "-c", _PROBE],
        env=_env(str(root)),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise BadInput(f"the shadow torch in {root} does not import:\n{proc.stderr[-2000:]}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    problems = []
    if not Path(info["torch"]).resolve().is_relative_to((root / "torch").resolve()):
        problems.append(f"torch came from {info['torch']}, not the shadow")
    if info["backend"] != backend or (backend == "neuron" and not info["neuron"]):
        problems.append(f"the {backend} backend did not load (backend {info['backend']!r})")
    real_lib = (real.torch_dir / "lib").resolve()
    names: dict[str, list[str]] = {}
    for lib in info["libs"]:
        names.setdefault(Path(lib).name, []).append(lib)
    for name, paths in names.items():
        if len(paths) > 1 or not Path(paths[0]).resolve().is_relative_to(real_lib):
            # torch's own libraries only (a backend's libtorch_*.so are its own files)
            if name.startswith(("libtorch", "libc10")) and (real_lib / name).exists():
                problems.append(f"{name} loaded from {paths}, expected once from {real_lib}")
    if problems:
        raise BadInput("the shadow torch is unusable: " + "; ".join(problems))
    return info


def hash_files(torch_dir: Path, series: Series) -> dict[str, str | None]:
    """sha256 of every ``torch/`` file the series touches in the installed torch (None: absent)."""
    result: dict[str, str | None] = {}
    for patch in series.patches:
        for fpatch in patch.files:
            if fpatch.path.startswith("torch/"):
                path = torch_dir.parent / fpatch.path
                result[fpatch.path] = (
                    hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
                )
    return result


@dataclass
class Report:
    """The whole verification: per patch verdicts, the shadow probe and timings."""

    series: str
    torch: str
    verdicts: list[PatchVerdict]
    seconds: float
    probe: dict
    runner: str = "warm"  # "warm": forks of a warm interpreter; "fresh": `python FILE`
    cold: dict[str, str] = field(default_factory=dict)  # configurations run fresh, and why

    @property
    def all_proven(self) -> bool:
        """True when every patch is proven."""
        return all(v.verdict == "proven" for v in self.verdicts)

    def to_json(self) -> dict:
        """The report as plain data (what ``--json`` writes)."""
        return {
            "series": self.series,
            "torch": self.torch,
            "seconds": round(self.seconds, 1),
            "all_proven": self.all_proven,
            "shadow_probe": self.probe,
            "runner": self.runner,
            "cold_configurations": self.cold,
            "patches": [asdict(v) for v in self.verdicts],
        }

    def table(self) -> list[str]:
        """A markdown table: patch | neuron, stock | neuron, patched | without neuron, stock (CI
        device or mock) | CPU with the series | lint | verdict; then the reasons of every patch
        not proven."""
        head = (
            "patch",
            "neuron, stock",
            "neuron, patched",
            "no neuron, stock (CI device / mock)",
            "fails before on OpenReg",
            "CPU, patched",
            "lint",
            "verdict",
        )
        rows = [(v.patch, *v.cells()) for v in self.verdicts]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

        def line(row: tuple[str, ...]) -> str:
            return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

        out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        out += [line(r) for r in rows]
        for v in self.verdicts:
            out += [f"{v.patch}: {v.verdict}: {reason}" for reason in v.reasons]
        proven = sum(v.verdict == "proven" for v in self.verdicts)
        out.append(f"{proven}/{len(self.verdicts)} patches proven in {self.seconds:.1f}s")
        return out


def _run_openreg(
    series: Series,
    verdicts: list[PatchVerdict],
    python: str,
    root: Path,
    timeout: float,
    jobs: int,
) -> None:
    """Each OpenReg test file, stock and patched, in ``python``'s environment (OpenReg's)."""
    real = installed_torch(python)
    real.check_base(series.base)
    refuse_overlaid(real)
    shadow = root / "openreg"
    shadow.mkdir()
    patched_shadow(series, real, shadow, python, backend="openreg")
    work = root / "cwd-openreg"  # no torch_openreg/ folder here: it would shadow the package
    work.mkdir()
    todo = [
        (t, shadow / t.file) for v in verdicts if v.openreg_not_applicable is None for t in v.tests
    ]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [
            (
                test,
                pool.submit(run_test_file, path, _env(None), work, timeout, python),
                pool.submit(run_test_file, path, _env(str(shadow)), work, timeout, python),
            )
            for test, path in todo
        ]
        for test, stock, patched in futures:
            test.stock_openreg, test.patched_openreg = stock.result(), patched.result()


def verify_series(
    series: Series,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int = 2,
    torch: InstalledTorch | None = None,
    keep: Path | None = None,
    fresh: bool = False,
    openreg: str | None = None,
) -> Report:
    """Verify every patch of ``series`` against the installed torch (unchanged throughout).

    Each test file runs in a fork of a warm interpreter of its configuration
    (tools/patchqueue/testrun.py), or, with ``fresh``, as ``python FILE`` in a new one.

    With ``openreg`` (the python of an environment whose torch has OpenReg, PyTorch's in-tree
    PrivateUse1 test backend, installed: ``import torch`` autoloads it), every test file that
    runs on OpenReg (all but those of a patch with an ``OpenReg: not applicable: <why>``
    trailer, :func:`openreg_not_applicable`) also runs there, stock and with the series (a
    shadow of that torch), fresh: the "fails before on OpenReg" column.

    Raises BadInput when the installed torch is not the base or already carries an overlay, or
    when the shadow torch is unusable.
    """
    start = time.monotonic()
    real = torch or installed_torch()
    real.check_base(series.base)
    refuse_overlaid(real)
    before = hash_files(real.torch_dir, series)
    not_applicable = {  # read (and refused when malformed) before the long runs
        p.name: openreg_not_applicable(p) if openreg is not None else None for p in series.patches
    }
    lint = lint_series(series, real)
    if keep is not None:
        root = Path(keep).resolve()
        try:
            root.mkdir(parents=True)
        except FileExistsError as exc:
            raise BadInput(f"{root}: --keep needs a folder that does not exist yet") from exc
    else:
        root = Path(tempfile.mkdtemp(prefix="patches-verify-")).resolve()
    try:
        probe = patched_shadow(series, real, root)
        work = root / "cwd"
        work.mkdir()
        verdicts = [
            PatchVerdict(
                p.name,
                p.subject,
                lint=lint[p.name],
                openreg_not_applicable=not_applicable[p.name],
            )
            for p in series.patches
        ]
        jobs_list = []
        for verdict, patch in zip(verdicts, series.patches, strict=True):
            for test in _test_files(patch):
                path = root / test
                runs = [
                    (path, _env(None), work, timeout),
                    (path, _env(str(root)), work, timeout),
                    (path, _env(None, autoload=False), work, timeout),
                    (path, _env(str(root), autoload=False), work, timeout),
                ]
                jobs_list.append((verdict, test, runs))
        runners = WarmRunners(work)
        run = run_test_file if fresh else runners.run
        try:
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                futures = [
                    (verdict, test, [pool.submit(run, *args) for args in runs])
                    for verdict, test, runs in jobs_list
                ]
                for verdict, test, fs in futures:
                    results = [f.result() for f in fs]
                    verdict.tests.append(TestResult(test, *results))
        finally:
            runners.close()
        if openreg is not None:
            _run_openreg(series, verdicts, openreg, root, timeout, jobs)
        for verdict in verdicts:
            _judge(verdict)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    after = hash_files(real.torch_dir, series)
    if before != after:  # pragma: no cover - a bug in the shadow, never expected
        raise BadInput(f"the installed torch changed during verify: {before} != {after}")
    return Report(
        str(series.directory),
        str(real.torch_dir),
        verdicts,
        time.monotonic() - start,
        probe,
        "fresh" if fresh else "warm",
        dict(runners.cold),
    )
