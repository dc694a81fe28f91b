"""``da-scan --fix`` (safe fixes only) must never make CUDA-first code worse, on any machine.

The corpus (tests/scan_corpus/, see its README.md) is runnable CUDA-first training, inference and
test scripts that keep a CPU fallback; each prints one JSON line of results. Every script is run:

- as written, on a machine without an accelerator (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``);
- after ``da-scan --fix`` of a copy, on that machine again: the results must be *identical*;
- after the fix, with neuron as the current accelerator: the results must match the original's
  on the CPU within float tolerance, except the fields the script names as the device's own
  (``DEVICE_FIELDS``).

A run that raises, or results that change, is a harmful safe fix; the failure names the script,
the line that raised and the fixes (rule, line, before/after) that led there. The runs are forked
from an interpreter that has imported torch (tests/script_runner.py: the same results, a tenth of
the time); SCAN_CORPUS_FRESH_INTERPRETERS=1 starts a fresh interpreter for each instead.

Detection quality is measured against the ``# expect:`` labels of the corpus (``DA1xx`` ids,
``any`` for "some rule", ``none`` for code that is CUDA by design): per-line precision and recall,
per rule, against the targets of 0.95.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from difflib import SequenceMatcher
from pathlib import Path

import pytest
from filelock import FileLock

from tools.scan_measure import ScanRun, fixes_applied, run_da_scan

CORPUS = Path(__file__).parent / "scan_corpus"
RUNNER = Path(__file__).parent / "script_runner.py"
SCRIPTS = sorted(p.stem for p in CORPUS.glob("*.py"))
PRECISION_TARGET = RECALL_TARGET = 0.95
SCRIPT_TIMEOUT = 180  # seconds; every script takes a few
RUNNER_START_TIMEOUT = 300  # seconds for tests/script_runner.py to import torch, on a busy machine

# Result fields that legitimately depend on the device a script ends up on (its name, what the
# device supports or reports); every other field must match the original's CPU run.
DEVICE_FIELDS: dict[str, frozenset[str]] = {
    "amp_fp16_flag": frozenset({"device"}),
    # GradScaler()/autocast() always on: they switch themselves on where the device supports
    # AMP ("used_amp"), but the losses must still match the CPU's float32 ones.
    "amp_trainer_class": frozenset({"device", "used_amp", "peak_memory_reported"}),
    "benchmark_streams": frozenset({"device", "param_device", "memory_reported"}),
    "compat_shims": frozenset({"device", "autocast_dtype"}),
    "ddp_single_process": frozenset({"device", "backend"}),
    # the backend and the device picked are the accelerator's after the fix
    "deploy_runtimes": frozenset({"device", "loaded", "backend_known"}),
    "finetune_dict_config": frozenset({"device"}),
    "profile_inference": frozenset({"device", "activities"}),
    # Generic GPU tests may run (not skip) on an accelerator; failures must stay empty.
    "pytest_cuda_skips": frozenset({"passed", "skipped"}),
    "resume_checkpoint": frozenset({"device", "loaded_on"}),
    "seed_everything": frozenset(),
    "train_argparse_device": frozenset({"device"}),
    "train_cnn_tf32": frozenset({"device"}),
    "train_config_dataclass": frozenset({"device", "param_device", "pin_memory"}),
    "triton_kernels": frozenset(),
    "unittest_cuda_skips": frozenset({"skipped"}),
}

# The three runs each script gets: label -> whether neuron is loaded.
ORIGINAL_CPU, FIXED_CPU, FIXED_NEURON = "original-cpu", "fixed-cpu", "fixed-neuron"
RUNS = {ORIGINAL_CPU: False, FIXED_CPU: False, FIXED_NEURON: True}
WHERE = {
    ORIGINAL_CPU: "without an accelerator",
    FIXED_CPU: "without an accelerator",
    FIXED_NEURON: "with neuron as the current accelerator",
}

EXPECT = re.compile(r"#\s*expect:\s*(?P<labels>[^#]*?)\s*$")
LABEL = re.compile(r"^(DA\d{3}|any|none)$")
TRACEBACK_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')


# --------------------------------------------------------------------------- running the corpus


@dataclass
class Run:
    """One run of a script; ``result`` is the last line of its stdout, as JSON."""

    label: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    result: dict | None = None


def script_env(accelerator: bool) -> dict[str, str]:
    """This environment, without the variables a launcher or pytest would have set (the
    scripts read RANK/LOCAL_RANK, and one runs pytest itself); neuron loads only on request."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PYTEST_")
        and key not in {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    }
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if accelerator else "0"
    env["OMP_NUM_THREADS"] = "1"  # the runs share the cores; every run uses the same setting
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def read_result(run: Run) -> Run:
    """``run`` with its result: the last line of its stdout, if that is JSON."""
    lines = run.stdout.strip().splitlines()
    if lines:
        try:
            run.result = json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
    return run


def run_script(path: Path, label: str) -> Run:
    """``python SCRIPT`` in a fresh interpreter (SCAN_CORPUS_FRESH_INTERPRETERS=1)."""
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, path.name],
            cwd=path.parent,
            env=script_env(RUNS[label]),
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        return Run(label, -1, "", f"timed out after {SCRIPT_TIMEOUT} s\n{stderr}", SCRIPT_TIMEOUT)
    return read_result(
        Run(label, done.returncode, done.stdout, done.stderr, time.monotonic() - start)
    )


def run_preloaded(
    jobs: list[tuple[Path, str]], accelerator: bool, folder: Path, timeout: float = SCRIPT_TIMEOUT
) -> list[Run]:
    """Run ``jobs`` (script, label) through tests/script_runner.py: children forked from one
    interpreter that has imported torch with the environment of ``accelerator``."""
    specs = [
        {
            "script": str(script),
            "stdout": str(folder / f"{script.stem}.{label}.out"),
            "stderr": str(folder / f"{script.stem}.{label}.err"),
            "timeout": timeout,
        }
        for script, label in jobs
    ]
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(os.cpu_count() or 2)],
        input=json.dumps(specs),
        env=script_env(accelerator),
        capture_output=True,
        text=True,
        timeout=RUNNER_START_TIMEOUT + timeout * len(jobs),
    )
    reports = {}
    for line in done.stdout.splitlines():
        report = json.loads(line)
        reports[report["index"]] = report
    runs = []
    for index, ((_, label), spec) in enumerate(zip(jobs, specs, strict=True)):
        report = reports.get(index)
        if report is None:  # the runner itself failed
            runs.append(Run(label, -1, "", f"script runner failed:\n{done.stderr[-3000:]}", 0.0))
            continue
        stderr = Path(spec["stderr"]).read_text(errors="replace")
        if report["timed_out"]:
            stderr += f"\ntimed out after {timeout} s"
        out = Path(spec["stdout"]).read_text(errors="replace")
        runs.append(read_result(Run(label, report["returncode"], out, stderr, report["seconds"])))
    return runs


def run_scripts(corpus: CorpusFix, names: list[str], folder: Path) -> dict[str, dict[str, Run]]:
    """The three runs of each of ``names``, all at once, as wide as the machine: forked from
    an interpreter per environment that has imported torch (about 0.5 s a run instead of 4),
    or each in a fresh interpreter if SCAN_CORPUS_FRESH_INTERPRETERS=1."""
    jobs = [(name, label) for name in names for label in RUNS]
    runs: dict[str, dict[str, Run]] = {name: {} for name in names}
    if os.environ.get("SCAN_CORPUS_FRESH_INTERPRETERS") == "1":
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            done = pool.map(lambda job: run_script(corpus.script(*job), job[1]), jobs)
            for (name, label), run in zip(jobs, done, strict=True):
                runs[name][label] = run
        return runs
    groups = {
        accelerator: [(name, label) for name, label in jobs if RUNS[label] is accelerator]
        for accelerator in (False, True)
    }
    groups = {accelerator: group for accelerator, group in groups.items() if group}
    if not groups:
        return runs
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        futures = {
            accelerator: pool.submit(
                run_preloaded, [(corpus.script(*job), job[1]) for job in group], accelerator, folder
            )
            for accelerator, group in groups.items()
        }
        for accelerator, future in futures.items():
            for (name, label), run in zip(groups[accelerator], future.result(), strict=True):
                runs[name][label] = run
    return runs


@dataclass
class CorpusFix:
    """The scan of the original corpus, the fix of a copy, and the sources before and after."""

    original_dir: str
    fixed_dir: str
    scan: dict  # a tools.scan_measure.ScanRun
    fix: dict
    sources: dict[str, dict[str, str]]

    def offered(self, name: str) -> list[dict]:
        """The findings the scan of the original reported in ``name``."""
        return [f for f in self.scan["findings"] if Path(f["path"]).stem == name]

    def script(self, name: str, label: str) -> Path:
        return Path(self.original_dir if label == ORIGINAL_CPU else self.fixed_dir) / f"{name}.py"


def build_fix(workdir: Path) -> CorpusFix:
    original_dir, fixed_dir = workdir / "original", workdir / "fixed"
    for folder in (original_dir, fixed_dir):
        folder.mkdir(parents=True)
        for name in SCRIPTS:
            shutil.copy2(CORPUS / f"{name}.py", folder / f"{name}.py")
    # Copies outside the repository: no pyproject.toml applies, so the default rules run.
    scan = run_da_scan([str(original_dir)])
    fix = run_da_scan(["--fix", str(fixed_dir)])
    sources = {
        name: {
            "original": (original_dir / f"{name}.py").read_text(),
            "fixed": (fixed_dir / f"{name}.py").read_text(),
        }
        for name in SCRIPTS
    }
    return CorpusFix(str(original_dir), str(fixed_dir), asdict(scan), asdict(fix), sources)


# The work is done once per session, in a folder shared by pytest-xdist workers (the first one
# to need a result computes it under the lock; the others read what it left).
def _workdir(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    return (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "scan_corpus"


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> CorpusFix:
    workdir = _workdir(tmp_path_factory)
    cache = workdir / "fix.json"
    with FileLock(f"{workdir}.lock"):
        if not cache.is_file():
            workdir.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(asdict(build_fix(workdir))))
    return CorpusFix(**json.loads(cache.read_text()))


def _selected_scripts(session: pytest.Session) -> list[str]:
    """The scripts whose runs a selected test reads (``-k`` runs only those)."""
    return sorted(
        {
            item.callspec.params["name"]
            for item in session.items
            if getattr(item, "module", None) is sys.modules[__name__]
            and "runs" in getattr(item, "fixturenames", ())
            and "name" in getattr(getattr(item, "callspec", None), "params", {})
        }
    )


@pytest.fixture(scope="session")
def runs(
    request: pytest.FixtureRequest, corpus: CorpusFix, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Run]]:
    """Every selected script's three runs: original without an accelerator, fixed without one,
    fixed with neuron."""
    folder = _workdir(tmp_path_factory) / "runs"
    names = _selected_scripts(request.session) or SCRIPTS
    with FileLock(f"{folder}.lock"):
        folder.mkdir(parents=True, exist_ok=True)
        missing = [name for name in names if not (folder / f"{name}.json").is_file()]
        for name, by_label in run_scripts(corpus, missing, folder).items():
            data = {label: asdict(run) for label, run in by_label.items()}
            (folder / f"{name}.json").write_text(json.dumps(data))
    return {
        name: {
            label: Run(**data)
            for label, data in json.loads((folder / f"{name}.json").read_text()).items()
        }
        for name in names
    }


# --------------------------------------------------------------------------- explaining a fix


def _blocks(original: str, fixed: str) -> list[tuple[str, int, int, int, int]]:
    a, b = original.splitlines(), fixed.splitlines()
    return SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def changed_lines(original: str, fixed: str) -> Iterator[tuple[int | None, str | None, str | None]]:
    """(original line number, original line, fixed line) for every line the fix changed; a
    block rewritten line for line is paired up, otherwise removed and added lines come apart."""
    a, b = original.splitlines(), fixed.splitlines()
    for tag, i1, i2, j1, j2 in _blocks(original, fixed):
        if tag == "equal":
            continue
        if i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                yield i + 1, a[i], b[j]
            continue
        for i in range(i1, i2):
            yield i + 1, a[i], None
        for j in range(j1, j2):
            yield None, None, b[j]


def original_line(original: str, fixed: str, fixed_number: int) -> tuple[int | None, bool]:
    """The original line a fixed line comes from (None for an added line), and whether the fix
    changed it."""
    for tag, i1, i2, j1, j2 in _blocks(original, fixed):
        if j1 < fixed_number <= j2:
            if tag == "equal" or i2 - i1 == j2 - j1:
                return i1 + fixed_number - j1, tag != "equal"
            return None, True
    return None, False


def rules_on(findings: list[dict], line: int) -> str:
    found = sorted(
        {f"{f['rule']} {f['fix_safety'] or 'report-only'}" for f in findings if f["line"] == line}
    )
    return ", ".join(found) or "no finding"


def describe_fix(corpus: CorpusFix, name: str) -> str:
    """What --fix changed in ``name``: each changed original line with the findings on it."""
    source = corpus.sources[name]
    offered = corpus.offered(name)
    out = []
    for number, before, after in changed_lines(source["original"], source["fixed"]):
        if number is not None:
            out.append(f"  {name}.py:{number} [{rules_on(offered, number)}]")
            out.append(f"    - {before.strip()}")
        if after is not None:
            out.append(f"    + {after.strip()}")
    return "\n".join(out) or "  (nothing: the fixed file is the original)"


def where_it_raised(corpus: CorpusFix, name: str, run: Run) -> str:
    """The innermost frame of the traceback that is in the fixed script, mapped back to the
    original line and the findings there."""
    fixed_path = str(Path(corpus.fixed_dir) / f"{name}.py")
    frames = [
        int(m["line"]) for m in TRACEBACK_FRAME.finditer(run.stderr) if m["path"] == fixed_path
    ]
    error = next(
        (
            line
            for line in reversed(run.stderr.strip().splitlines())
            if line and not line[0].isspace()
        ),
        "",
    )
    if not frames:
        return f"  {error}"
    source = corpus.sources[name]
    fixed_number = frames[-1]
    fixed_text = source["fixed"].splitlines()[fixed_number - 1].strip()
    number, changed = original_line(source["original"], source["fixed"], fixed_number)
    lines = [f"  raised at {name}.py:{fixed_number} (fixed): {fixed_text}", f"  {error}"]
    if number is not None:
        original_text = source["original"].splitlines()[number - 1].strip()
        how = f"rewritten [{rules_on(corpus.offered(name), number)}]" if changed else "unchanged"
        lines.insert(1, f"  original {name}.py:{number} ({how}): {original_text}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- comparing results


def differences(got: object, want: object, fuzzy: bool, where: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: exactly, or floats within tolerance if ``fuzzy``."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing" for k in want if k not in got]
        out += [f"{where}.{k}: unexpected" for k in got if k not in want]
        for key in want.keys() & got.keys():
            out += differences(got[key], want[key], fuzzy, f"{where}.{key}")
        return out
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in differences(g, w, fuzzy, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if fuzzy and isinstance(want, float) and isinstance(got, numbers) and not isinstance(got, bool):
        if math.isclose(got, want, rel_tol=1e-4, abs_tol=2e-5):
            return []
    elif got == want and type(got) is type(want):
        return []
    return [f"{where or 'result'}: {got!r} (original on the CPU: {want!r})"]


def assert_original_works(runs: dict[str, dict[str, Run]], name: str) -> Run:
    run = runs[name][ORIGINAL_CPU]
    assert run.returncode == 0 and run.result is not None, (
        f"corpus bug: {name}.py as written fails without an accelerator "
        f"(exit {run.returncode}):\n{run.stderr[-3000:]}\nstdout: {run.stdout[-500:]}"
    )
    return run


def assert_fix_completed(corpus: CorpusFix) -> None:
    """A crashed --fix leaves the copy as it was, which would make every comparison pass."""
    assert not corpus.fix["error"], f"da-scan --fix did not complete: {corpus.fix['error']}"


def assert_fixed_run_like_original(
    corpus: CorpusFix, runs: dict[str, dict[str, Run]], name: str, label: str
) -> None:
    original = assert_original_works(runs, name)
    assert_fix_completed(corpus)
    fixed = runs[name][label]
    header = f"harmful safe fix in {name}.py: the fixed script {WHERE[label]}"
    if fixed.returncode != 0 or fixed.result is None:
        pytest.fail(
            f"{header} exits {fixed.returncode} (the original runs on the CPU):\n"
            f"{where_it_raised(corpus, name, fixed)}\n"
            f"what --fix changed:\n{describe_fix(corpus, name)}\n"
            f"stderr (end):\n{fixed.stderr[-2500:]}",
            pytrace=False,
        )
    want, got = original.result, dict(fixed.result)
    fuzzy = label == FIXED_NEURON
    if fuzzy:
        for key in DEVICE_FIELDS[name]:
            if key in want and key in got:
                got[key] = want[key]
    changed = differences(got, want, fuzzy)
    if changed:
        pytest.fail(
            f"{header} gives other results:\n  " + "\n  ".join(changed[:20]) + "\n"
            f"what --fix changed:\n{describe_fix(corpus, name)}",
            pytrace=False,
        )


# --------------------------------------------------------------------------- the behaviour tests


def test_every_script_declares_its_device_fields() -> None:
    assert sorted(DEVICE_FIELDS) == SCRIPTS, "add new corpus scripts to DEVICE_FIELDS"


RUNNER_PROBES = {
    "reports": "import json, os, sys\n"
    "print(json.dumps([os.path.basename(sys.argv[0]), os.path.basename(os.getcwd()),\n"
    "                  sys.path[0] == os.getcwd(), __name__, sys.stdin.read()]))\n",
    "exits": "import sys\nprint('partial')\nsys.exit(3)\n",
    "exits_with_message": "raise SystemExit('bye')\n",
    "raises": "def f():\n    raise ValueError('boom')\nf()\n",
}


def test_script_runner_exits_and_prints_as_python_would(tmp_path: Path) -> None:
    folder = tmp_path / "probes"
    folder.mkdir()
    for name, code in {**RUNNER_PROBES, "sleeps": "import time\ntime.sleep(60)\n"}.items():
        (folder / f"{name}.py").write_text(code)
    jobs = [(folder / f"{name}.py", name) for name in [*RUNNER_PROBES, "sleeps"]]
    forked = run_preloaded(jobs, accelerator=False, folder=tmp_path, timeout=3)
    *probes, sleeper = forked
    for (script, _), got in zip(jobs, probes, strict=False):
        fresh = subprocess.run(
            [sys.executable, script.name],
            cwd=folder,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (got.returncode, got.stdout) == (fresh.returncode, fresh.stdout), script.name
        last = [line for line in fresh.stderr.splitlines() if line][-1:]
        assert [line for line in got.stderr.splitlines() if line][-1:] == last, script.name
    assert sleeper.returncode == -9 and "timed out" in sleeper.stderr


@pytest.mark.parametrize("name", SCRIPTS)
def test_original_runs_without_an_accelerator(runs: dict[str, dict[str, Run]], name: str) -> None:
    run = assert_original_works(runs, name)
    missing = DEVICE_FIELDS[name] - run.result.keys()
    assert not missing, f"{name}: DEVICE_FIELDS names fields the script does not print: {missing}"
    if "device" in run.result:
        assert str(run.result["device"]).startswith("cpu"), f"{name} did not fall back to the CPU"


def test_fix_completes_and_every_rewrite_compiles(corpus: CorpusFix) -> None:
    assert_fix_completed(corpus)
    assert corpus.fix["returncode"] in (0, 1), (
        f"da-scan --fix exit {corpus.fix['returncode']}:\n{corpus.fix['stderr'][-3000:]}"
    )
    assert fixes_applied(ScanRun(**corpus.fix)), f"nothing fixed:\n{corpus.fix['stderr'][-2000:]}"
    for name in SCRIPTS:
        fixed = corpus.sources[name]["fixed"]
        compile(fixed, f"{name}.py (fixed)", "exec", dont_inherit=True)


@pytest.mark.parametrize("name", SCRIPTS)
def test_fixed_script_runs_like_the_original_without_an_accelerator(
    corpus: CorpusFix, runs: dict[str, dict[str, Run]], name: str
) -> None:
    assert_fixed_run_like_original(corpus, runs, name, FIXED_CPU)


@pytest.mark.parametrize("name", SCRIPTS)
def test_fixed_script_runs_on_neuron_like_the_original_on_the_cpu(
    corpus: CorpusFix, runs: dict[str, dict[str, Run]], name: str
) -> None:
    assert_fixed_run_like_original(corpus, runs, name, FIXED_NEURON)


# --------------------------------------------------------------------------- detection quality


def read_labels(text: str) -> dict[int, frozenset[str]]:
    """``# expect: DA101 DA103`` / ``any`` / ``none`` at the end of a line, by line number."""
    labels = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            labels[number] = frozenset(re.split(r"[\s,]+", match["labels"].strip()))
    return labels


@dataclass
class Score:
    """Per-line detection counts, per rule (and "any" for lines any rule may flag)."""

    hits: Counter = field(default_factory=Counter)
    misses: Counter = field(default_factory=Counter)
    false_positives: Counter = field(default_factory=Counter)
    by_design_flagged: int = 0
    by_design_lines: int = 0
    missed: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    @staticmethod
    def ratio(good: int, bad: int) -> float:
        return good / (good + bad) if good + bad else 1.0

    @property
    def precision(self) -> float:
        return self.ratio(sum(self.hits.values()), sum(self.false_positives.values()))

    @property
    def recall(self) -> float:
        return self.ratio(sum(self.hits.values()), sum(self.misses.values()))

    def table(self) -> str:
        rows = sorted(
            {*self.hits, *self.misses, *self.false_positives}, key=lambda r: (r == "any", r)
        )
        lines = [
            f"{'rule':<6} {'labelled':>8} {'hits':>5} {'misses':>6} {'false+':>6} "
            f"{'precision':>9} {'recall':>7}"
        ]
        for rule in [*rows, "total"]:
            if rule == "total":
                h, m, f = (sum(c.values()) for c in (self.hits, self.misses, self.false_positives))
            else:
                h, m, f = self.hits[rule], self.misses[rule], self.false_positives[rule]
            lines.append(
                f"{rule:<6} {h + m:>8} {h:>5} {m:>6} {f:>6} "
                f"{self.ratio(h, f):>9.3f} {self.ratio(h, m):>7.3f}"
            )
        lines.append(
            f"CUDA-by-design lines (expect: none): {self.by_design_lines}, "
            f"flagged: {self.by_design_flagged}"
        )
        return "\n".join(lines)


def score_detection(
    labels: dict[str, dict[int, frozenset[str]]],
    findings: dict[str, dict[int, set[str]]],
    sources: dict[str, str],
) -> Score:
    score = Score()
    for name in sorted(labels):
        text = sources[name].splitlines()
        for line in sorted(labels[name].keys() | findings.get(name, {}).keys()):
            expected = labels[name].get(line, frozenset())
            found = findings.get(name, {}).get(line, set())
            shown = f"{name}.py:{line}: {text[line - 1].strip()}"
            specific = expected - {"any", "none"}
            score.by_design_lines += "none" in expected
            score.by_design_flagged += "none" in expected and bool(found)
            for rule in sorted(specific):
                if rule in found:
                    score.hits[rule] += 1
                else:
                    score.misses[rule] += 1
                    score.missed.append(f"{rule} missed at {shown}")
            if "any" in expected:
                if found:
                    score.hits["any"] += 1
                else:
                    score.misses["any"] += 1
                    score.missed.append(f"any rule missed at {shown}")
                continue
            for rule in sorted(found - specific):
                score.false_positives[rule] += 1
                why = (
                    "CUDA by design"
                    if "none" in expected
                    else f"labelled {sorted(expected) or '-'}"
                )
                score.wrong.append(f"{rule} false positive ({why}) at {shown}")
    return score


def test_corpus_labels_are_well_formed() -> None:
    for name in SCRIPTS:
        labels = read_labels((CORPUS / f"{name}.py").read_text())
        assert labels, f"{name}.py has no # expect: labels"
        for line, found in labels.items():
            bad = sorted(label for label in found if not LABEL.match(label))
            assert not bad, f"{name}.py:{line}: unknown labels {bad} (DA1xx, any or none)"
            assert "none" not in found or len(found) == 1, f"{name}.py:{line}: none with others"


def test_detection_meets_precision_and_recall_targets(corpus: CorpusFix) -> None:
    assert not corpus.scan["error"], corpus.scan["error"]
    findings: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for finding in corpus.scan["findings"]:
        findings[Path(finding["path"]).stem][finding["line"]].add(finding["rule"])
    originals = {name: corpus.sources[name]["original"] for name in SCRIPTS}
    labels = {name: read_labels(text) for name, text in originals.items()}
    score = score_detection(labels, findings, originals)
    report = "\n".join([score.table(), *score.missed, *score.wrong])
    print(report)
    assert score.precision >= PRECISION_TARGET and score.recall >= RECALL_TARGET, (
        f"precision {score.precision:.3f} (target {PRECISION_TARGET}), "
        f"recall {score.recall:.3f} (target {RECALL_TARGET}):\n{report}"
    )
