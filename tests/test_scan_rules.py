"""Every rule flags exactly the lines its fixture marks, and documents itself."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from device_agnostic.scan import ALL_RULES, scan_file, scan_source
from device_agnostic.scan.rules import REVIEW, SAFE
from device_agnostic.scan.rules.base import ACCELERATOR_TYPE

FIXTURES = Path(__file__).parent / "scan_fixtures"
EXPECT = re.compile(r"#\s*expect:\s*(?P<ids>[A-Z0-9, ]+)")


def expected_findings(path: Path) -> list[tuple[int, str]]:
    expected = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = EXPECT.search(line)
        if match:
            expected += [(number, rule) for rule in re.split(r"[ ,]+", match["ids"].strip())]
    return sorted(expected)


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.py")), ids=lambda p: p.stem)
def test_fixture_flags_exactly_the_expected_lines(fixture: Path) -> None:
    found = sorted((f.line, f.rule) for f in scan_file(str(fixture)))
    expected = expected_findings(fixture)
    assert found == expected, (
        f"{fixture.name}: unexpected {sorted(set(found) - set(expected))}, "
        f"missing {sorted(set(expected) - set(found))}"
    )


def test_every_rule_has_a_fixture() -> None:
    covered = {rule for path in FIXTURES.glob("*.py") for _, rule in expected_findings(path)}
    assert {rule.id for rule in ALL_RULES} <= covered


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_rule_documents_itself(rule) -> None:
    assert re.fullmatch(r"DA1\d\d", rule.id)
    assert rule.name and rule.summary and len(rule.why) > 40
    assert rule.fix_safety in (SAFE, REVIEW)
    doc = rule.__doc__ or ""
    assert "Before::" in doc and "After::" in doc, f"{rule.id} lacks a before/after example"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_rule_flags_its_before_example_and_not_its_after_example(rule) -> None:
    doc = rule.__doc__ or ""
    before = textwrap.dedent(doc.split("Before::", 1)[1].split("After::", 1)[0])
    after = textwrap.dedent(doc.split("After::", 1)[1])
    findings = scan_source("before.py", before.encode(), [rule])
    assert findings, f"{rule.id} does not flag its own 'before' example"
    assert all(f.fix_safety in (SAFE, REVIEW) for f in findings)
    # Every finding has a replacement, but for what has no device-generic spelling (DA112's
    # cuDNN convolution switch) or none that fits every use (DA114, DA115): the finding says so.
    assert all(
        f.replacement or "no such switch" in f.message or "no rewrite" in f.message
        for f in findings
    )
    # The "after" may still hold a CUDA-only name where no generic one exists (DA109).
    after_findings = scan_source("after.py", after.encode(), [rule])
    assert rule.id == "DA109" or not after_findings, after_findings


def test_findings_carry_the_replacement_and_its_safety() -> None:
    [finding] = scan_source("m.py", b"import torch as t\nt.cuda.current_device()\n")
    assert (finding.line, finding.col, finding.rule) == (2, 1, "DA101")
    assert finding.replacement == "torch.accelerator.current_device_index"
    assert finding.fix_safety == SAFE
    assert (finding.end_line, finding.end_col) == (2, len("t.cuda.current_device") + 1)


def test_literal_with_an_index_keeps_the_index() -> None:
    [finding] = scan_source("m.py", b'x.to("cuda:3")\n')
    assert finding.replacement == f'{ACCELERATOR_TYPE} + ":3"'


def test_every_device_rewrite_keeps_the_str_type_of_the_literal() -> None:
    """A str stays a str (``"cuda" in device``, string configs, ``autocast(device_type=)``),
    and equals the literal where no accelerator is present (the generated expression is
    evaluated here with ``current_accelerator()`` returning None)."""

    class NoAccelerator:
        @staticmethod
        def current_accelerator(check_available: bool = False) -> None:
            return None

    class Torch:
        accelerator = NoAccelerator

    source = (
        b'a = torch.zeros(2, device="cuda")\nb = x.to("cuda:1")\nc = x.to(f"cuda:{r}")\n'
        b'd = x.to("cuda:{}".format(r))\ndevice = "cuda"\n'
    )
    originals = {1: "cuda", 2: "cuda:1", 3: "cuda:7", 4: "cuda:7", 5: "cuda"}
    for finding in scan_source("m.py", source):
        value = eval(finding.replacement, {"torch": Torch, "r": 7})
        assert value == originals[finding.line], finding


def test_scanner_does_not_import_torch() -> None:
    code = (
        "import sys, device_agnostic.scan.cli, device_agnostic.scan.report\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('device_agnostic.neuron')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_dot_cuda_with_arguments_keeps_them_and_needs_review() -> None:
    [finding] = scan_source("m.py", b"y = x.cuda(1, non_blocking=True)\n")
    assert finding.replacement == (f"x.to(torch.device({ACCELERATOR_TYPE}, 1), non_blocking=True)")
    assert finding.fix_safety == REVIEW


def test_amp_call_is_replaced_whole_with_its_arguments() -> None:
    source = b"from torch.cuda import amp\nwith amp.autocast(dtype=torch.bfloat16):\n    pass\n"
    [finding] = scan_source("m.py", source)
    # review: on another accelerator it turns mixed precision on (other numbers)
    assert (finding.rule, finding.col, finding.fix_safety) == ("DA105", 6, REVIEW)
    assert finding.replacement == f"torch.amp.autocast({ACCELERATOR_TYPE}, dtype=torch.bfloat16)"


def test_comparisons_of_unrelated_strings_are_not_flagged() -> None:
    source = b'if node.attr == "cuda" or name == "nccl":\n    pass\n'
    assert scan_source("m.py", source) == []


def test_cuda_literal_is_a_safe_fix_in_a_device_argument_and_as_a_value() -> None:
    source = (
        b"import torch\n"
        b'x = torch.zeros(2, device="cuda" if ok else "cpu")\n'
        b'device = "cuda" if ok else "cpu"\n'
        b"def pick_device():\n"
        b'    return "cuda:1"\n'
    )
    found = {(f.line, f.fix_safety, f.replacement) for f in scan_source("m.py", source)}
    assert found == {
        (2, "safe", ACCELERATOR_TYPE),
        (3, "safe", ACCELERATOR_TYPE),
        (5, "safe", f'{ACCELERATOR_TYPE} + ":1"'),
    }


@pytest.mark.parametrize(
    ("path", "source"),
    [
        (  # a Triton kernel module
            "kernels/swiglu.py",
            "import torch\nimport triton\n\n@triton.jit\ndef k(x):\n    pass\n\n"
            "def run(e):\n    return torch.empty(3, device='cuda')\n",
        ),
        (  # a vendored kernel package's folder (unsloth)
            "ext/unsloth/executor.py",
            "def ok(x):\n    return x.device.type == 'cuda'\n",
        ),
        (  # an NVLink check: the guard and what it opens
            "m.py",
            "import torch\nif torch.cuda.is_available():\n"
            "    p = torch.cuda.get_device_properties(0)\n"
            "    check_nvlink_connectivity(p)\n",
        ),
        (  # onnxruntime's providers chosen by a stored check
            "m.py",
            "import torch\ncuda = torch.cuda.is_available()\n"
            "providers = ['CUDAExecutionProvider'] if cuda else ['CPUExecutionProvider']\n",
        ),
        (  # a bitsandbytes weight quantized by moving it to CUDA
            "m.py",
            "def merge(w):\n    if w.dtype == 'uint8':\n        import bitsandbytes as bnb\n"
            "        q = bnb.nn.Params4bit(w)\n        q.cuda(w.device)\n",
        ),
        (  # a TensorRT engine's device, after an optional import
            "m.py",
            "import torch\ndef engine():\n    try:\n        import tensorrt\n"
            "    except ImportError:\n        return None\n    return torch.device('cuda:0')\n",
        ),
    ],
    ids=["triton", "unsloth-folder", "nvlink", "onnxruntime", "bitsandbytes", "tensorrt"],
)
def test_cuda_by_design_code_is_not_reported(path: str, source: str) -> None:
    assert scan_source(path, source.encode()) == []


def test_by_design_recognition_stays_narrow() -> None:
    """A top-level import of a CUDA-only library does not hide the rest of the script, and an
    assert for one does not hide what follows it."""
    source = (
        b"import torch\nimport apex\n"
        b"x = torch.zeros(2, device='cuda')\n"
        b"assert torch.cuda.is_available(), 'apex needs CUDA'\n"
        b"y = torch.zeros(2, device='cuda')\n"
    )
    assert [(f.line, f.rule) for f in scan_source("train.py", source)] == [
        (3, "DA103"),
        (5, "DA103"),
    ]


def test_mocks_count_only_in_tests_and_folders_only_near_the_file() -> None:
    """A library that patches torch.cuda for itself is no test's mock; a checkout that lives
    under a folder named "triton" is not a kernel package."""
    patch = b'from unittest import mock\nmock.patch("torch.cuda.device_count", return_value=1)\n'
    assert scan_source("torch/_functorch/aot_autograd.py", patch) == []
    assert [f.rule for f in scan_source("tests/test_devices.py", patch)] == ["DA101"]
    code = b"import torch\nx = torch.zeros(2, device='cuda')\n"
    assert [f.rule for f in scan_source("/home/triton/work/app/src/pkg/m.py", code)] == ["DA103"]
    assert scan_source("pkg/unsloth/kernels/m.py", code) == []


def test_a_guard_next_to_a_comparison_keeps_its_rewrite() -> None:
    """Only a "cuda" the switch chooses blocks the guard's rewrite; one it compares with
    (``device == "cuda"``) is DA107's."""
    source = b'if device == "cuda" and not torch.cuda.is_available():\n    device = "cpu"\n'
    guard = next(f for f in scan_source("m.py", source) if f.rule == "DA101")
    assert guard.replacement == "torch.accelerator.is_available"
    switch = b'run("cuda" if torch.cuda.is_available() and ok else "cpu")\n'
    guard = next(f for f in scan_source("m.py", switch) if f.rule == "DA101")
    assert guard.replacement == "" and "no rewrite" in guard.message
