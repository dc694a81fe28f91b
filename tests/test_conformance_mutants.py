"""The conformance suite catches bugs: each deliberately broken backend (tests/mutants/) makes
at least one conformance test fail, in the area that owns the broken behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conformance

TESTS = Path(__file__).parent
MANIFESTS = Path(conformance.__file__).parent / "backends"


def run_conformance(
    tmp_path: Path, areas: list[str], extra: list[str], env: dict[str, str] | None = None
) -> dict:
    """Run the given areas on neuron (quick profile) in a subprocess; return the JSON run."""
    report = tmp_path / "run.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--backend=neuron",
        "--conformance-profile=quick",
        f"--conformance-json={report}",
        *extra,
        "--pyargs",
    ]
    command += [f"conformance.test_{area}" for area in areas]
    full_env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    )
    completed = subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=600)
    assert report.exists(), f"no report was written:\n{completed.stdout}\n{completed.stderr}"
    run = json.loads(report.read_text())
    run["returncode"] = completed.returncode
    run["output"] = completed.stdout[-3000:]
    return run


def failures(run: dict) -> list[dict]:
    return [r for r in run["results"] if r["outcome"] in ("failed", "error")]


MUTANTS = {
    # mutant: the areas that must catch it
    "wrong_values": ["operators", "capabilities"],
    "silent_downcast": ["operators"],
    "leaky_memory_stat": ["memory", "capabilities"],
    "rng_ignores_seed": ["rng"],
    "reordering_stream": ["streams"],
}


def _existing(areas: list[str]) -> list[str]:
    root = Path(conformance.__file__).parent
    return [area for area in areas if (root / f"test_{area}.py").exists()]


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_mutant_is_caught(tmp_path, mutant):
    areas = _existing(MUTANTS[mutant])
    assert areas, f"no conformance area exists to catch {mutant}"
    run = run_conformance(tmp_path, areas, ["-p", f"mutants.{mutant}"])
    caught = failures(run)
    assert caught, f"mutant {mutant} was not caught by {areas}:\n{run['output']}"
    assert run["returncode"] != 0
    assert {r["area"] for r in caught} <= set(areas)


def test_capability_declared_but_missing_is_caught(tmp_path):
    # A manifest that claims float64 on a backend that has none.
    manifest_dir = tmp_path / "manifests"
    manifest_dir.mkdir()
    for name in ("cpu", "neuron"):
        text = (MANIFESTS / f"{name}.toml").read_text()
        if name == "neuron":
            text = text.replace('dtypes = ["float32",', 'dtypes = ["float64", "float32",', 1)
        (manifest_dir / f"{name}.toml").write_text(text)
    run = run_conformance(tmp_path, ["capabilities"], [f"--manifest-dir={manifest_dir}"])
    caught = failures(run)
    assert any("float64" in r["nodeid"] for r in caught), run["output"]
    assert any("declares dtypes[torch.float64] = true" in r["detail"] for r in caught)
