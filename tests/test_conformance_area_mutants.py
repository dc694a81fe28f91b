"""The compile, distributed, profiler and stream-concurrency areas catch bugs: each deliberately
broken backend (tests/mutants/) makes a test of its area fail in the quick profile, and the
unbroken backend passes the same area (so the failure is the mutant's)."""

from __future__ import annotations

import pytest
from test_conformance_mutants import failures, run_conformance

AREA_MUTANTS = {
    # mutant: (its area, the environment the area needs to see it)
    "compile_lowers_precision": ("compile", {}),
    "allreduce_on_a_copy": ("distributed", {}),
    "slow_profiler": ("profiler", {}),
    # A wait that does nothing is visible only when work runs behind the host's back.
    "waitless_stream": ("stream_concurrency", {"NEURON_LAUNCH_BLOCKING": "0"}),
    # A block reused while a side stream still reads it: likewise only when work is pending.
    "record_stream_ignored": ("stream_concurrency", {"NEURON_LAUNCH_BLOCKING": "0"}),
}
# Each environment once, with every area whose mutants need it: the stream-concurrency area also
# runs in neuron's default synchronous mode, where its tests must pass too (proving issue order
# only). One run per environment rather than per area: an interpreter and a collection each.
UNBROKEN: dict[tuple[tuple[str, str], ...], set[str]] = {(): {"stream_concurrency"}}
for _area, _env in AREA_MUTANTS.values():
    UNBROKEN.setdefault(tuple(sorted(_env.items())), set()).add(_area)


@pytest.mark.parametrize("mutant", sorted(AREA_MUTANTS))
def test_area_catches_its_mutant(tmp_path, mutant):
    area, env = AREA_MUTANTS[mutant]
    run = run_conformance(tmp_path, [area], ["-p", f"mutants.{mutant}"], env=env)
    caught = failures(run)
    assert caught, f"mutant {mutant} was not caught by the {area} area:\n{run['output']}"
    assert run["returncode"] != 0
    assert {r["area"] for r in caught} == {area}


@pytest.mark.parametrize(
    "env", sorted(UNBROKEN), ids=lambda env: "".join(f"{k}={v}" for k, v in env) or "default"
)
def test_areas_pass_on_the_unbroken_backend(tmp_path, env):
    areas = sorted(UNBROKEN[env])
    run = run_conformance(tmp_path, areas, [], env=dict(env))
    assert not failures(run), run["output"]
    assert run["returncode"] == 0, run["output"]
    # Every area ran (a run of several areas collects tests even if one area has none).
    assert {r["area"] for r in run["results"]} == set(areas), run["output"]
