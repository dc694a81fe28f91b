"""The conformance suite catches bugs: each deliberately broken backend (tests/mutants/) makes
at least one conformance test fail, in the area that owns the broken behaviour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import conformance_warm
import pytest

import conformance

TESTS = Path(__file__).parent
MANIFESTS = Path(conformance.__file__).parent / "backends"


def run_conformance(
    tmp_path: Path,
    areas: list[str],
    extra: list[str],
    env: dict[str, str] | None = None,
    backend: str = "neuron",
    profile: str = "quick",
) -> dict:
    """Run the given areas on ``backend`` (quick profile unless given) in a subprocess (a fork of
    a warm interpreter, tests/conformance_warm.py, unless ``env`` adds to the environment);
    return the JSON run."""
    report = tmp_path / "run.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--conformance-backend={backend}",
        f"--conformance-profile={profile}",
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
    if env:
        # NEURON_LAUNCH_BLOCKING and the like are read when neuron loads: a fresh interpreter.
        completed = subprocess.run(
            command, capture_output=True, text=True, env=full_env, timeout=600
        )
    else:
        completed = conformance_warm.run_pytest(command[3:], full_env, report, timeout=600)
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
    run = run_conformance(
        tmp_path, ["capabilities"], [f"--conformance-manifest-dir={manifest_dir}"]
    )
    caught = failures(run)
    assert any("float64" in r["nodeid"] for r in caught), run["output"]
    assert any("declares dtypes[torch.float64] = true" in r["detail"] for r in caught)


# One mutant per input class that the strategies draw (conformance/strategies.py): each is
# caught by the tests of that class alone (the -k selection), in the quick profile; the same
# selection passes on the references (test_input_class_tests_pass_on_the_references).
INPUT_CLASS_MUTANTS = {
    # mutant: (area, the tests of its input class)
    "sum_ignores_view_strides": (
        "operators",
        "test_core_op_matches_reference_on_drawn_inputs and sum-random",
    ),
    "argmax_last_of_ties": (
        "operators",
        "test_core_op_matches_reference_on_drawn_inputs and argmax-ties",
    ),
    "softmax_overflows": (
        "operators",
        "test_core_op_matches_reference_on_drawn_inputs and softmax-extremal",
    ),
    "int_sum_narrow_accumulator": (
        "operators",
        "test_core_op_matches_reference_on_drawn_inputs and sum-limits",
    ),
    "scatter_add_drops_duplicates": ("operators", "test_accumulating_op_adds_repeated_indices"),
    "clamp_bounds_swapped": ("operators", "test_clamp_with_drawn_bounds_matches_reference"),
    "bfloat16_rounds_half_away": (
        "dtypes",
        "test_conversion_to_every_declared_dtype_matches_reference",
    ),
    "masked_select_on_host": ("operators", "test_data_dependent_output_is_on_the_device"),
    "complex_gemm_conjugates_transposed": ("operators", "test_opinfo and complex64"),
    "tanh_backward_wrong": ("operators", "test_opinfo_gradients"),
    # random ops by their statistics, seeding off device 0, timing with a lower bound, and
    # live tensors across empty_cache
    "dropout_scales_by_inverse_p": ("rng", "test_dropout_zeroes_at_rate_p"),
    "dropout_ignores_p": ("rng", "test_dropout_zeroes_at_rate_p"),
    "manual_seed_seeds_device_0": ("rng", "test_device_module_manual_seed_seeds_a_non_zero"),
    "event_time_stamped_at_submission": ("streams", "test_elapsed_time_of_a_long_region"),
    "empty_cache_releases_live_blocks": ("memory", "test_empty_cache_keeps_the_values"),
    # the missed defect classes of issue 25
    "out_not_resized": ("out", "test_an_out_of_the_wrong_size_is_resized"),
    "complex_mul_drops_imaginary_product": (
        "operators",
        "test_core_op_matches_reference_on_drawn_inputs and mul-random",
    ),
    "rng_draws_from_the_host_generator": ("capabilities", "test_per_device_rng"),
    "rng_state_loses_its_position": ("rng", "test_rng_state_round_trip_replays_the_numbers"),
    "peak_memory_of_device_0": (
        "current_device",
        "test_peak_memory_statistics_without_an_index_are_the_current_devices",
    ),
    "map_location_to_device_0": (
        "current_device",
        "test_an_index_less_map_location_loads_onto_the_current_device",
    ),
    "pin_memory_copies_storage_linearly": (
        "pinned",
        "test_pin_memory_of_a_non_contiguous_tensor_keeps_its_values",
    ),
    # operators judged on their drawn arguments
    "topk_ignores_largest": ("arguments", "test_op_matches_reference_on_drawn_arguments and topk"),
    "cumsum_ignores_dtype": (
        "arguments",
        "test_op_matches_reference_on_drawn_arguments and cumsum_dtype",
    ),
    "embedding_backward_ignores_padding_idx": (
        "arguments",
        "test_embedding_like_op_matches_reference_on_drawn_arguments_and_backward"
        " or test_embedding_padding_row_gets_no_gradient",
    ),
    "pow_negative_exponent_by_magnitude": (
        "arguments",
        "test_op_matches_reference_on_drawn_arguments and pow_integer",
    ),
    "mul_broadcasts_leading_dims_only": (
        "arguments",
        "test_op_matches_reference_on_drawn_arguments and mul_broadcast",
    ),
    "nll_loss_ignores_weight": ("operators", "test_opinfo and cross_entropy-float32"),
    "window_on_the_current_device": (
        "creation",
        "test_factories_create_on_the_named_device_not_the_current_one",
    ),
}


@pytest.mark.parametrize("mutant", sorted(INPUT_CLASS_MUTANTS))
def test_input_class_mutant_is_caught(tmp_path, mutant):
    area, selection = INPUT_CLASS_MUTANTS[mutant]
    run = run_conformance(tmp_path, [area], ["-p", f"mutants.{mutant}", "-k", selection])
    caught = failures(run)
    assert caught, f"mutant {mutant} was not caught by {area} -k {selection!r}:\n{run['output']}"
    assert run["returncode"] != 0
    assert {r["area"] for r in caught} == {area}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["neuron", "cpu"])
def test_input_class_tests_pass_on_the_references(tmp_path, backend):
    """The tests that catch the input-class mutants pass on the unbroken backends, so that a
    failure under a mutant is the mutant's."""
    by_area: dict[str, list[str]] = {}
    for area, selection in INPUT_CLASS_MUTANTS.values():
        by_area.setdefault(area, []).append(f"({selection})")
    # One run of every area, each area's module with its own selections (the same tests as a
    # run per area, without an interpreter and a collection per area).
    selection = " or ".join(
        f"(test_{area}.py and ({' or '.join(selections)}))"
        for area, selections in sorted(by_area.items())
    )
    run = run_conformance(tmp_path, sorted(by_area), ["-k", selection], backend=backend)
    assert not failures(run), run["output"]
    assert run["returncode"] == 0, run["output"]
    passed_areas = {r["area"] for r in run["results"] if r["outcome"] == "passed"}
    # neuron has every capability these tests need; the CPU is no accelerator and has one
    # device and no per-device RNG, so its stream, memory, pinned, second-device and
    # per_device_rng tests are not applicable
    not_on_cpu = {"memory", "streams", "pinned", "current_device", "creation", "capabilities"}
    expected = set(by_area) if backend == "neuron" else set(by_area) - not_on_cpu
    assert passed_areas == expected, f"no test passed in {sorted(expected - passed_areas)}"
