"""What the profiles cover: the default profile compares every OpInfo in every dtype that a
backend's manifest declares, and the gradients of every OpInfo that supports autograd in every
declared floating dtype.

The expected cases are computed here from the manifest file (read with tomllib, not through the
suite's manifest loader) and torch's OpInfo list, and compared with the test ids that pytest
actually collects for the default profile: the suite's own selection function is not used, so a
selection that drops a case (a rotation over dtypes, an "every Nth operator") fails this test.
The suite's ``exclusion`` (random or uninitialized output, factories, sparse layouts, the cases
PyTorch's own cross-device check skips) is the one policy shared with it, and
``test_exclusions_leave_most_cases_in`` keeps that policy from growing into a second selection.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

import conformance
from conformance.test_operators import exclusion, op_database

MANIFESTS = Path(conformance.__file__).parent / "backends"


def _declared(backend: str) -> list[torch.dtype]:
    text = (MANIFESTS / f"{backend}.toml").read_text()
    return [getattr(torch, name) for name in tomllib.loads(text)["capabilities"]["dtypes"]]


def _expected_ids(backend: str) -> set[str]:
    """Every (OpInfo, declared dtype) pair that the CPU reference has a kernel for and that no
    exclusion applies to, as the test id's parameter: ``<name>[.<variant>]-<dtype>``."""
    ops, problem = op_database()
    assert not problem, problem
    expected = set()
    for op in ops:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        for dtype in _declared(backend):
            if op.supports_dtype(dtype, "cpu") and not exclusion(op, dtype):
                expected.add(f"{name}-{str(dtype).removeprefix('torch.')}")
    return expected


def _expected_gradient_ids(backend: str) -> set[str]:
    """Every (OpInfo with autograd, declared floating dtype) pair the CPU reference has a
    backward kernel for and no exclusion applies to."""
    ops, _ = op_database()
    floating = [d for d in _declared(backend) if d.is_floating_point and d.itemsize >= 2]
    expected = set()
    for op in ops:
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        for dtype in floating:
            if (
                op.supports_autograd
                and dtype in op.supported_backward_dtypes("cpu")
                and not exclusion(op, dtype)
            ):
                expected.add(f"{name}-{str(dtype).removeprefix('torch.')}")
    return expected


@functools.cache
def _collection(backend: str, profile: str) -> str:
    """What ``pytest --collect-only -q`` prints for the operator area under ``profile``
    (collected once per backend and profile: it takes most of a minute)."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--conformance-backend={backend}",
        f"--conformance-profile={profile}",
        "--pyargs",
        "conformance.test_operators",
    ]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


def _collected_ids(backend: str, profile: str, test: str = "test_opinfo") -> list[str]:
    """The parameters of the ``test`` cases that pytest collects for ``profile``."""
    prefix = f"::{test}["
    return [
        line.split(prefix, 1)[1].removesuffix("]")
        for line in _collection(backend, profile).splitlines()
        if prefix in line
    ]


@pytest.mark.parametrize("backend", ["neuron", "cpu"])
def test_default_profile_compares_every_opinfo_in_every_declared_dtype(backend):
    expected = _expected_ids(backend)
    collected = _collected_ids(backend, "default")
    assert len(collected) == len(set(collected)), "a case is collected twice"
    missing = sorted(expected - set(collected))
    assert not missing, (
        f"the default profile on {backend} leaves out {len(missing)} of {len(expected)} "
        f"OpInfo x declared dtype cases, e.g. {missing[:10]}"
    )
    # Beyond the expected set only cases named by the manifest's known failures may appear.
    extra = set(collected) - expected
    manifest = (MANIFESTS / f"{backend}.toml").read_text()
    assert all(f"test_opinfo[{case}]" in manifest for case in extra), sorted(extra)[:10]
    # Every declared dtype is reached (a dtype whose cases all vanished would pass above only
    # if the expected set lost it too).
    dtypes = {case.rsplit("-", 1)[1] for case in collected}
    assert dtypes == {str(d).removeprefix("torch.") for d in _declared(backend)}


@pytest.mark.parametrize("backend", ["neuron", "cpu"])
def test_exclusions_leave_most_cases_in(backend):
    """The exclusions are a few kinds of operator (random, uninitialized, factories, sparse,
    jiterator, the cross-device check's skips): they must not remove a large share of the
    cases the reference can run, or default's coverage would shrink through them."""
    ops, _ = op_database()
    runnable = [
        (op, dtype) for op in ops for dtype in _declared(backend) if op.supports_dtype(dtype, "cpu")
    ]
    excluded = [(op, dtype) for op, dtype in runnable if exclusion(op, dtype)]
    assert len(excluded) < 0.15 * len(runnable), (
        f"{len(excluded)} of {len(runnable)} runnable OpInfo x dtype cases are excluded"
    )


@pytest.mark.parametrize("backend", ["neuron", "cpu"])
def test_default_profile_compares_gradients_in_every_declared_floating_dtype(backend):
    expected = _expected_gradient_ids(backend)
    collected = _collected_ids(backend, "default", "test_opinfo_gradients")
    assert len(collected) == len(set(collected)), "a case is collected twice"
    missing = sorted(expected - set(collected))
    assert not missing, (
        f"the default profile on {backend} leaves out {len(missing)} of {len(expected)} "
        f"OpInfo gradient x declared floating dtype cases, e.g. {missing[:10]}"
    )
