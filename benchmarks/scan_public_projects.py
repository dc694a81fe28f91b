"""da-scan on six CUDA-first public projects it was not written against: precision, recall and
safe fixes, against the labels below (issue 28).

    .venv/bin/python benchmarks/scan_public_projects.py ROOT [--json OUT]

ROOT holds one folder per project (named as in ``PROJECTS``), each a checkout of the commit
given there, for example::

    git clone https://github.com/ultralytics/yolov5 ROOT/yolov5
    git -C ROOT/yolov5 checkout 5081342f04fb287fc2e5f2b5a4e06752b7937b1c

The projects' code is read, never copied here: the labels name lines (path, line, rule).

- A finding is a true positive unless ``FALSE_POSITIVES`` names it: code that is CUDA by design
  (a Triton/FlashAttention/NVIDIA-hardware concern, a CUDA-only runtime or package choice, a
  test of a CUDA-only strategy) where reporting it asks the user to change what must not change.
- ``MISSES`` are the lines a correct scanner reports that this one does not (some rule).
- ``HARMFUL_SAFE`` are the lines where a safe fix was found harmful (executed, or read against
  the semantics of the code it feeds); the run fails if any of them is still a safe fix.

Precision is also given outside tests, and with the findings in tests gated on CUDA GPUs
(``_RunIf(min_cuda_gpus=...)``) counted as false positives, the strictest reading.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

# name -> (GitHub repository, commit the labels were made on)
PROJECTS: dict[str, tuple[str, str]] = {
    "litgpt": ("Lightning-AI/litgpt", "26857050fe3ff627cd714fe92f5838f51a3d5efa"),
    "CLIP": ("openai/CLIP", "d05afc436d78f1c48dc0dbf8e5980a9d471f35f6"),
    "yolov5": ("ultralytics/yolov5", "5081342f04fb287fc2e5f2b5a4e06752b7937b1c"),
    "llm.c": ("karpathy/llm.c", "f1e2ace651495b74ae22d45d1723443fd00ecd3a"),
    "segment-anything": (
        "facebookresearch/segment-anything",
        "dca509fe793f601edb92606367a655c15ac00fdf",
    ),
    "denoising-diffusion-pytorch": (
        "lucidrains/denoising-diffusion-pytorch",
        "faed4db28e724735323fa91c70aa9b28a6e1cbac",
    ),
}

# (project, path, line, rule) -> why the finding is CUDA by design
FALSE_POSITIVES: dict[tuple[str, str, int, str], str] = {
    ("yolov5", "export.py", 748, "DA101"): "picks the tensorflow GPU package (else -cpu)",
    ("litgpt", "tests/test_model.py", 1484, "DA101"): "FlashAttention's compute-capability gate",
    ("litgpt", "tests/test_model.py", 1520, "DA103"): "tests CUDA's SDPA backend choice",
    ("litgpt", "tests/test_model.py", 1568, "DA103"): "tests CUDA's SDPA backend choice",
    ("litgpt", "litgpt/generate/sequentially.py", 213, "DA103"): (
        "sequential generation is CUDA-only (api.py raises for any other accelerator)"
    ),
    ("litgpt", "tests/generate/test_sequentially.py", 155, "DA103"): "tests the CUDA-only mode",
    ("litgpt", "tests/generate/test_sequentially.py", 286, "DA115"): "tests the CUDA-only mode",
    ("litgpt", "tests/generate/test_tp.py", 127, "DA115"): "tests the CUDA-only mode",
    ("denoising-diffusion-pytorch", "denoising_diffusion_pytorch/attend.py", 59, "DA101"): (
        "chooses FlashAttention for an A100"
    ),
    ("denoising-diffusion-pytorch", "denoising_diffusion_pytorch/attend.py", 62, "DA101"): (
        "chooses FlashAttention for an A100"
    ),
    ("denoising-diffusion-pytorch", "denoising_diffusion_pytorch/attend.py", 62, "DA103"): (
        "chooses FlashAttention for an A100"
    ),
}
# The test_model.py finding at 1484 is reported twice (is_available, get_device_capability).

# (project, path, line): a CUDA assumption no rule reports
MISSES: list[tuple[str, str, int]] = [
    ("litgpt", "litgpt/api.py", 216),  # accelerator = "cuda" (a Lightning accelerator name)
    ("litgpt", "litgpt/api.py", 301),  # the same
    ("litgpt", "litgpt/api.py", 314),  # CUDAAccelerator.auto_device_count()
    ("litgpt", "litgpt/api.py", 319),  # the same
]

# (project, path, line): a safe fix there was harmful
HARMFUL_SAFE: dict[tuple[str, str, int], str] = {
    ("litgpt", "litgpt/utils.py", 557): (
        "device_count() or 1 decides Lightning's strategy: FSDP on neuron, and the test that "
        "mocks torch.cuda.device_count no longer reaches it"
    ),
    ("yolov5", "train.py", 261): "device_count() > 1 picks DataParallel, which raises on neuron",
    ("yolov5", "segment/train.py", 234): "the same",
}


def scan(project_dir: Path) -> list[dict]:
    """``da-scan --format json`` on the whole project (its tests too: mocks count)."""
    done = subprocess.run(
        [sys.executable, "-m", "device_agnostic.scan", "--format", "json", str(project_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode not in (0, 1):
        raise SystemExit(f"da-scan failed on {project_dir}: {done.stderr[-2000:]}")
    findings = json.loads(done.stdout)
    for finding in findings:
        finding["path"] = str(Path(finding["path"]).relative_to(project_dir))
    return findings


def _is_test(path: str) -> bool:
    parts = Path(path).parts
    return "tests" in parts or "test" in parts or Path(path).name.startswith("test_")


def cuda_gated_lines(path: Path) -> set[int]:
    """The lines of test functions (and ``pytest.param`` cases) gated on CUDA GPUs."""
    try:
        tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        gate = None
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any("min_cuda_gpus" in ast.unparse(d) for d in node.decorator_list):
                gate = node
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("param")
            and "min_cuda_gpus" in ast.unparse(node)
        ):
            gate = node
        if gate is not None:
            start = min([gate.lineno, *(d.lineno for d in getattr(gate, "decorator_list", []))])
            lines.update(range(start, (gate.end_lineno or gate.lineno) + 1))
    return lines


def measure(root: Path) -> dict:
    per_project = {}
    totals: Counter = Counter()
    false_positives_seen = set()
    for name in PROJECTS:
        project_dir = root / name
        if not project_dir.is_dir():
            raise SystemExit(f"{project_dir}: missing (see this file's docstring)")
        findings = scan(project_dir)
        gated_cache: dict[str, set[int]] = {}
        counts: Counter = Counter()
        hit_lines = set()
        harmful = []
        for f in findings:
            if f["kind"] != "finding" or f["rule"].startswith("DA9"):
                continue
            key = (name, f["path"], f["line"], f["rule"])
            fp = key in FALSE_POSITIVES
            if fp:
                false_positives_seen.add(key)
            test = _is_test(f["path"])
            if test and f["path"] not in gated_cache:
                gated_cache[f["path"]] = cuda_gated_lines(project_dir / f["path"])
            gated = test and f["line"] in gated_cache.get(f["path"], set())
            counts["findings"] += 1
            counts["fp"] += fp
            counts["fp_outside_tests"] += fp and not test
            counts["findings_outside_tests"] += not test
            counts["fp_strict"] += fp or gated
            if f["fix_safety"] == "safe" and f["replacement"]:
                counts["safe"] += 1
                if (name, f["path"], f["line"]) in HARMFUL_SAFE:
                    harmful.append(f"{f['path']}:{f['line']}")
            for line in range(f["line"], (f["end_line"] or f["line"]) + 1):
                hit_lines.add((f["path"], line))
        misses = [m for m in MISSES if m[0] == name and (m[1], m[2]) not in hit_lines]
        counts["misses"] = len(misses)
        counts["harmful_safe"] = len(harmful)
        per_project[name] = {**counts, "harmful_safe_at": harmful}
        totals.update(counts)
    tp = totals["findings"] - totals["fp"]
    outside = totals["findings_outside_tests"]
    result = {
        "projects": per_project,
        "findings": totals["findings"],
        "true_positives": tp,
        "false_positives": totals["fp"],
        "misses": totals["misses"],
        "precision": round(tp / totals["findings"], 3),
        "precision_outside_tests": round((outside - totals["fp_outside_tests"]) / outside, 3),
        "precision_cuda_gated_tests_as_false": round(
            (totals["findings"] - totals["fp_strict"]) / totals["findings"], 3
        ),
        "recall": round(tp / (tp + totals["misses"]), 3),
        "safe_fixes": totals["safe"],
        "harmful_safe_fixes": totals["harmful_safe"],
        "stale_labels": sorted(map(list, set(FALSE_POSITIVES) - false_positives_seen)),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the folder holding the six checkouts")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    result = measure(args.root)
    for key, value in result.items():
        if key != "projects":
            print(f"{key}: {value}")
    for name, counts in result["projects"].items():
        print(f"  {name}: {dict(counts)}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if result["harmful_safe_fixes"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
