"""Reports: one JSON file per run, and a Markdown matrix (area x run) over any number of runs.

``conformance-report RUN.json [RUN.json ...] [--markdown OUT.md]`` merges runs of several
backends, or of stock and patched torch, into one matrix.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

# "torch fault": a failure that a CUDA assumption in torch causes (conformance/torch_faults.toml),
# not the backend's; it does not fail the run unless it was strict about torch. "timeout": a test
# that ran past its time limit (it fails the run, but says nothing of the semantics).
OUTCOMES = ("passed", "failed", "error", "timeout", "known", "torch fault", "not applicable")
FAILING = ("failed", "error", "timeout")


@dataclasses.dataclass(frozen=True)
class Result:
    """One test's outcome: passed, failed, error, known (expected failure) or not applicable."""

    nodeid: str
    area: str
    outcome: str
    detail: str = ""  # the failure (exception first), or why it is not applicable or known
    # For failures: the root cause, which groups failures in the reports.
    error: str = ""  # the first line of the exception, "Type: message"
    where: str = ""  # the callable that raised it, "file.py::function"
    dispatcher_dump: str = ""  # the dispatcher's kernel listing, cut out of an exception
    # For a failure torch causes: "torch's fault (patch N fixes it): why [file:line; link]".
    torch_fault: str = ""
    timeout: str = ""  # for a timeout: what it is, and the option that raises the limit


# The dispatcher's "Could not run 'aten::x' with arguments from the 'B' backend" lists every
# dispatch key's kernel, one "Key: registered at file:line [kind]" line each: a hundred lines
# that bury the exception.
_DUMP_LINE = re.compile(r"^\s*\w[\w ]*: (registered at |fallthrough registered at |registered in )")


def split_dispatcher_dump(text: str) -> tuple[str, str]:
    """``text`` without the dispatcher's kernel listing, and the listing ("" if none)."""
    lines = text.splitlines()
    dump = [i for i, line in enumerate(lines) if _DUMP_LINE.match(line)]
    if len(dump) < 3:
        return text, ""
    kept = [line for i, line in enumerate(lines) if i not in set(dump)]
    listing = [lines[i] for i in dump]
    # "Could not run 'aten::x' with arguments from the 'B' backend. This could be because ...
    # only available for these backends: [forty keys]." keeps its first sentence.
    for index, line in enumerate(kept):
        match = _COULD_NOT_RUN.search(line)
        if match:
            kept[index] = line[: match.start(2)].rstrip()
            listing.insert(0, match.group(2).strip())
    return "\n".join(kept).rstrip() + "\n", "\n".join(listing)


_COULD_NOT_RUN = re.compile(
    r"(Could not run '[^']+' with arguments from the '[^']+' backend\.)"
    r"( This could be because .*?only available for these backends: \[[^\]]*\]\.)"
)


def cause(
    result: dict, backend: str = "", parameters: frozenset[str] | None = None
) -> tuple[str, str]:
    """A failure's root cause: (its normalised first error line, the frame that matters).

    The message is normalised so that one bug reads as one cause whatever the test's parameters:
    numbers, dtypes and the backend's device names are masked, and so is every expression that
    names one of the test's parameter values (the op, the view, the variant: "x.unfold(1, 3, 2)"
    and "torch.view_as_real(x)" in the same sentence are one shape). The frame is the test that
    judged (the first frame outside pytest, hypothesis and the suite's helpers) for the suite's
    own verdicts (an AssertionError, pytest's "DID NOT RAISE"); an exception that torch or the
    backend raised is its message alone, wherever the test reached it (one missing kernel, one
    cause). ``parameters``: the parameter values to mask (failure_groups passes those of every
    failing test, so that "abs" is masked in every message once it names a test's variant);
    by default the result's own.
    """
    nodeid = result.get("nodeid", "")
    error = _error(result)
    crashed = _CRASHED.match(error)
    if crashed:  # xdist's report of a dead worker: one cause per test function
        return f"worker crashed{crashed.group(1) or ''}", _function(nodeid)
    if parameters is None:
        parameters = frozenset(_parameters(nodeid))
    error = _DTYPE.sub("<dtype>", error)
    error = _mask_parameters(error, parameters)
    error = _DEVICE.sub("<device>", error)
    if backend and backend != "cpu":  # "Unknown device type openreg", "torch_openreg.openreg"
        error = re.sub(rf"[\w.]*\b{re.escape(backend)}\b", "<device>", error, flags=re.I)
    error = _NUMBER.sub("N", error)
    error = re.sub(r"(N)(, N)+", r"\1", error)  # a shape or an index list of any length
    if not error.startswith(_VERDICTS):
        return error[:200], ""
    where = result.get("where", "")
    if "::_" in where:  # a test module's helper check: what it found, not what led there
        error = f"{error.split(':', 1)[0]}: ...{re.split(r', yet |; ', error)[-1]}"
    return error[:200], where


_VERDICTS = ("AssertionError", "Failed:", "Failed ", "Unexpected success", "Timeout")
_DTYPE = re.compile(
    r"\b(torch\.)?(float|bfloat|int|uint|complex)\d+\w*\b"
    r"|\b(Half|BFloat16|Float|Double|ComplexFloat|ComplexDouble|Long|Int|Short|Byte|Char|Bool)(?=')"
)
# Device names: "openreg:0", "cuda:1", "device(type='openreg', index=0)"; the CPU stays.
_DEVICE = re.compile(r"device\(type='\w+'(, index=\d+)?\)|(?<![\w.])(?!cpu\b)[a-z]\w*:\d+\b")
_NUMBER = re.compile(r"(?<![\w<])[-+]?(0x[0-9a-fA-F]+|\d+(\.\d+)?([eE][-+]?\d+)?)(?![\w>])")


_CRASHED = re.compile(r"worker '\w+' crashed while running '[^']*'(.*)$")


def _function(nodeid: str) -> str:
    """ "test_x.py::test_y" of a node id, without its parameters."""
    return nodeid.split("[", 1)[0].split("conformance/", 1)[-1]


def _parameters(nodeid: str) -> set[str]:
    """The parameter values in a node id's "[a-b]", whole and one by one."""
    if not nodeid.endswith("]") or "[" not in nodeid:
        return set()
    params = nodeid[nodeid.index("[") + 1 : -1]
    return {params, *params.split("-")} - {""}


def _mask_parameters(error: str, tokens: frozenset[str]) -> str:
    """``error`` with each expression that names one of the parameter values masked."""
    for token in sorted(tokens, key=len, reverse=True):
        if len(token) < 2 or token.isdigit() or token.startswith("<"):
            continue
        pattern = (
            r"(?<![\w<])[\w.]*" + re.escape(token) + r"[\w.]*(\([^()]*\))?(?![\w>])"
            if re.fullmatch(r"[\w.]+", token)
            else re.escape(token)
        )
        error = re.sub(pattern, "<param>", error, flags=re.IGNORECASE)
    return error


def _error(result: dict) -> str:
    return result.get("error") or (result.get("detail", "").strip().splitlines() or [""])[-1]


def failure_groups(
    results: Sequence[dict], backend: str = ""
) -> list[tuple[tuple[str, str], list[dict]]]:
    """Failed and erroring results grouped by cause (``backend``'s name masked), the largest
    group first."""
    failing = [result for result in results if result["outcome"] in ("failed", "error")]
    parameters = frozenset(p for result in failing for p in _parameters(result["nodeid"]))
    groups: dict[tuple[str, str], list[dict]] = {}
    for result in failing:
        groups.setdefault(cause(result, backend, parameters), []).append(result)
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))


def torch_fault_groups(results: Sequence[dict]) -> list[tuple[str, list[dict]]]:
    """Results that torch's own faults explain, grouped by fault, the largest group first."""
    groups: dict[str, list[dict]] = {}
    for result in results:
        if result.get("torch_fault"):  # by patch: "torch's fault (patch N fixes it): why ..."
            groups.setdefault(result["torch_fault"].split(": ", 1)[0], []).append(result)
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))


def timeouts_markdown(run: dict) -> list[str]:
    """The tests of one run that ran past their time limit."""
    timeouts = [r for r in run["results"] if r["outcome"] == "timeout"]
    if not timeouts:
        return []
    lines = ["", f"### Timeouts in {run['label']}: {len(timeouts)} tests", ""]
    lines.append(timeouts[0].get("timeout", "timeout, not a semantic failure"))
    lines.append("")
    return lines + [f"- `{_short(r['nodeid'])}`" for r in timeouts]


def torch_faults_markdown(run: dict) -> list[str]:
    """The tests of one run that fail for torch's own faults, by fault."""
    groups = torch_fault_groups(run["results"])
    if not groups:
        return []
    count = sum(len(members) for _, members in groups)
    red = "they fail the run (strict)" if run.get("strict_torch") else "not the backend's"
    lines = ["", f"### Torch's own faults in {run['label']}: {count} tests ({red})", ""]
    for label, members in groups:
        lines.append(f"- **{len(members)}** x {label}")
        lines += [
            f"  - `{_short(result['nodeid'])}`: {result['torch_fault'].split(': ', 1)[-1]}"
            for result in members
        ]
    return lines


def _short(nodeid: str) -> str:
    return nodeid.split("conformance/", 1)[-1]


def failures_markdown(run: dict) -> list[str]:
    """The failures of one run grouped by cause; each dispatcher dump folded."""
    groups = failure_groups(run["results"], run.get("backend", ""))
    if not groups:
        return []
    count = sum(len(members) for _, members in groups)
    lines = ["", f"### Failures of {run['label']}: {count} in {len(groups)} causes", ""]
    for _, members in groups:
        where = members[0].get("where", "")
        at = f" in `{where}`" if where else ""
        lines.append(f"- **{len(members)}** x `{_error(members[0])}`{at}")
        for result in members:
            lines.append(f"  - `{_short(result['nodeid'])}` ({result['outcome']})")
        dump = next((r["dispatcher_dump"] for r in members if r.get("dispatcher_dump")), "")
        if dump:
            lines += [
                "",
                f"  <details><summary>dispatcher dump ({len(dump.splitlines())} lines)</summary>",
                "",
                "  ```",
                *(f"  {line}" for line in dump.splitlines()),
                "  ```",
                "",
                "  </details>",
            ]
    return lines


def write_json(path: Path, run: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=1, sort_keys=True))


def read_run(path: Path) -> dict:
    try:
        run = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"conformance-report: cannot read {path}: {error}") from error
    if not isinstance(run, dict) or "results" not in run or "label" not in run:
        raise SystemExit(
            f"conformance-report: {path} is not a conformance run (--conformance-json)"
        )
    return run


def _cell(counts: dict[str, int]) -> str:
    if not counts:
        return "-"
    parts = [f"{counts[o]} {o}" for o in OUTCOMES if counts.get(o)]
    mark = "FAIL" if any(counts.get(o) for o in FAILING) else "ok"
    return f"{mark}: " + ", ".join(parts)


def matrix(runs: Sequence[dict]) -> str:
    """The Markdown matrix: one row per area, one column per run."""
    labels = [run["label"] for run in runs]
    areas = sorted({r["area"] for run in runs for r in run["results"]})
    lines = [
        "| area | " + " | ".join(labels) + " |",
        "| --- | " + " | ".join("---" for _ in labels) + " |",
    ]
    for area in areas:
        cells = []
        for run in runs:
            counts: dict[str, int] = {}
            for result in run["results"]:
                if result["area"] == area:
                    counts[result["outcome"]] = counts.get(result["outcome"], 0) + 1
            cells.append(_cell(counts))
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    totals = []
    for run in runs:
        failed = sum(r["outcome"] in FAILING for r in run["results"])
        incomplete = "" if is_complete(run) else ", incomplete"
        totals.append(f"{len(run['results'])} tests, {failed} failing{incomplete}")
    lines.append("| **total** | " + " | ".join(totals) + " |")
    details = [
        f"- {run['label']}: backend {run['backend']}, torch {run['torch']}"
        f"{_patch_state(run)}, profile {run['profile']}{_capabilities(run)}{_completeness(run)}"
        for run in runs
    ]
    stale = [
        f"- {run['label']}: stale manifest entry `{entry['test']}` matches no test"
        + (f"; {entry['hint']}" if entry.get("hint") else "")
        for run in runs
        for entry in run.get("stale_known_failures", [])
    ]
    failures = [
        line
        for run in runs
        for line in failures_markdown(run) + timeouts_markdown(run) + torch_faults_markdown(run)
    ]
    return "\n".join(lines + [""] + details + stale + failures + differences(runs)) + "\n"


def is_complete(run: dict) -> bool:
    """False for a run that ended before its last test (Ctrl-C, -x): its results are the ones
    so far. Runs written before the field existed were complete."""
    return run.get("complete", True)


def _completeness(run: dict) -> str:
    if is_complete(run):
        return ""
    why = "interrupted" if run.get("interrupted") else "stopped early"
    return f", **incomplete ({why})**: only the tests that ran before it ended"


def _patch_state(run: dict) -> str:
    patches = run.get("patches") or []
    return f" + {len(patches)} series patches" if patches else " (stock)"


def _capabilities(run: dict) -> str:
    if run.get("capabilities") == "probed":
        return ", capabilities **probed, not declared** (no manifest)"
    return ""


def differences(runs: Sequence[dict]) -> list[str]:
    """A table of the tests whose outcome differs between runs of the same backend (stock and
    patched torch, typically): the per-test view the area matrix hides. Empty if none."""
    by_backend: dict[str, list[dict]] = {}
    for run in runs:
        by_backend.setdefault(run["backend"], []).append(run)
    lines: list[str] = []
    for backend, group in by_backend.items():
        if len(group) < 2:
            continue
        outcomes = [{r["nodeid"]: r["outcome"] for r in run["results"]} for run in group]
        nodeids = sorted({n for table in outcomes for n in table})
        changed = [n for n in nodeids if len({table.get(n, "-") for table in outcomes}) > 1]
        lines += ["", f"Tests whose outcome differs between the {backend} runs:", ""]
        if not changed:
            lines.append("(none)")
            continue
        labels = [run["label"] for run in group]
        lines.append("| test | " + " | ".join(labels) + " |")
        lines.append("| --- | " + " | ".join("---" for _ in labels) + " |")
        for nodeid in changed:
            name = nodeid.split("conformance/", 1)[-1]
            cells = [table.get(nodeid, "-") for table in outcomes]
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def write_markdown(path: Path, runs: Sequence[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(matrix(runs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conformance-report", description="Merge conformance runs into one matrix."
    )
    parser.add_argument("runs", nargs="+", type=Path, help="JSON files from --conformance-json")
    parser.add_argument("--markdown", type=Path, help="also write the matrix here")
    args = parser.parse_args(argv)
    runs = [read_run(path) for path in args.runs]
    text = matrix(runs)
    sys.stdout.write(text)
    if args.markdown:
        write_markdown(args.markdown, runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
