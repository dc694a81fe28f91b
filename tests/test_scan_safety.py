"""What "safe" means, executed: a safe fix gives the same result on a machine without an
accelerator (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``, no CUDA), raises nothing new there, and runs
on another accelerator (neuron). Each case is one defect class the issue found in real projects;
the CUDA side is covered by the signature table (test_scan_signatures.py) and the documented
semantics of each replacement (equal to the literal or call it replaces when CUDA is present).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from device_agnostic.scan import ALL_RULES
from device_agnostic.scan.fix import fix_source

PRELUDE = "import json, torch\n"

# name -> (source that prints one JSON line, the fields allowed to differ on neuron)
CASES: dict[str, tuple[str, set[str]]] = {
    "keyword-to-positional-only": (
        "d = 0\n"
        "if torch.cuda.is_available():\n"
        "    torch.cuda.synchronize(device=d)\n"
        "print(json.dumps({'ok': True}))\n",
        set(),
    ),
    "device-switch": (
        'device = "cuda" if torch.cuda.is_available() else "cpu"\n'
        "x = torch.ones(2, device=device)\n"
        "print(json.dumps({'device': x.device.type, 'is_str': isinstance(device, str)}))\n",
        {"device"},
    ),
    "device-switch-with-index": (
        'device = "cuda:0" if torch.cuda.is_available() else "cpu"\n'
        "x = torch.ones(2, device=device)\n"
        "print(json.dumps({'device': x.device.type}))\n",
        {"device"},
    ),
    "seeding": (
        "torch.manual_seed(0)\n"
        "torch.cuda.manual_seed_all(0)\n"
        "print(json.dumps({'r': torch.rand(3).tolist()}))\n",
        set(),
    ),
    "device-default-at-definition": (
        'def make(n, device=torch.device("cuda")):\n'
        "    return device\n"
        "print(json.dumps({'type': make(1).type}))\n",
        {"type"},
    ),
    "str-device-stays-str": (
        'device = "cuda"\n'
        "print(json.dumps({'is_str': isinstance(device, str), 'n': len(device) > 0}))\n",
        set(),
    ),
    "skip-around-cuda-only-test": (
        "import unittest\n"
        "class T(unittest.TestCase):\n"
        "    @unittest.skipIf(not torch.cuda.is_available(), 'needs CUDA')\n"
        "    def test_name(self):\n"
        "        self.assertIn('NVIDIA', torch.cuda.get_device_name(0))\n"
        "r = unittest.TextTestRunner(stream=open(__import__('os').devnull, 'w')).run(\n"
        "    unittest.defaultTestLoader.loadTestsFromTestCase(T))\n"
        "print(json.dumps({'failed': len(r.failures) + len(r.errors), "
        "'skipped': len(r.skipped)}))\n",
        set(),
    ),
    "assert-before-cuda-only-library": (
        "use_apex = False\n"
        "if torch.cuda.is_available():\n"
        "    import apex  # noqa: F401\n"
        "    use_apex = True\n"
        "print(json.dumps({'apex': use_apex}))\n",
        set(),
    ),
    "autocast-device-type": (
        "with torch.autocast(device_type='cuda', enabled=False):\n"
        "    y = torch.ones(2) * 2\n"
        "print(json.dumps({'y': y.tolist()}))\n",
        set(),
    ),
    "memory-functions-without-an-accelerator": (
        "torch.cuda.empty_cache()\n"
        "used = torch.cuda.memory_allocated()\n"
        "if torch.cuda.is_available():\n"
        "    used = torch.cuda.max_memory_allocated() * 0\n"
        "print(json.dumps({'used': used}))\n",
        set(),
    ),
    # litgpt's parse_devices: the count with an `or 1` fallback decides Lightning's strategy
    "device-count-or-fallback": (
        "n = torch.cuda.device_count() or 1\nprint(json.dumps({'n': n}))\n",
        set(),
    ),
    # yolov5's DP mode: the count chooses DataParallel, which raises on other accelerators
    "data-parallel-by-count": (
        "torch.manual_seed(0)\n"
        "model = torch.nn.Linear(2, 2)\n"
        "if torch.cuda.device_count() > 1:\n"
        "    model = torch.nn.DataParallel(model)\n"
        "y = model(torch.ones(1, 2))\n"
        "print(json.dumps({'y': [round(v, 5) for v in y[0].tolist()]}))\n",
        set(),
    ),
    # CLIP's load(): the switch as a parameter default, rewritten whole (guard and literal)
    "switch-in-parameter-default": (
        'def load(name, device="cuda" if torch.cuda.is_available() else "cpu"):\n'
        "    return torch.ones(1, device=device).device.type\n"
        "print(json.dumps({'device': load('ViT')}))\n",
        {"device"},
    ),
    "guard-of-review-code": (
        "name = 'none'\n"
        "if torch.cuda.is_available():\n"
        "    name = torch.cuda.get_device_name(0)\n"
        "print(json.dumps({'name': name}))\n",
        set(),
    ),
}


RUNNER = """
import contextlib, io, json, sys, traceback
cases = json.load(open(sys.argv[1]))
out = {}
for name, code in cases.items():
    stream = io.StringIO()
    try:
        with contextlib.redirect_stdout(stream):
            exec(compile(code, name, "exec"), {"__name__": "__main__"})
        out[name] = json.loads(stream.getvalue().strip().splitlines()[-1])
    except BaseException:
        out[name] = {"raised": traceback.format_exc()[-1500:]}
print(json.dumps(out))
"""


def run_all(codes: dict[str, str], tmp_path: Path, accelerator: bool) -> dict[str, dict]:
    """Every case in one interpreter (each in its own namespace): one torch import per run."""
    cases = tmp_path / f"cases_{accelerator}.json"
    cases.write_text(json.dumps(codes))
    env = dict(os.environ)
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1" if accelerator else "0"
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[str, dict, dict, dict]]:
    """name -> (fixed code, before without an accelerator, after without, after on neuron)."""
    tmp = tmp_path_factory.mktemp("safety")
    before, after = {}, {}
    for name, (body, _) in CASES.items():
        before[name] = PRELUDE + body
        result = fix_source(f"{name}.py", before[name].encode(), ALL_RULES, unsafe=False)
        assert not result.error, (name, result.error)
        after[name] = result.after.decode()
    cpu_before = run_all(before, tmp, accelerator=False)
    cpu_after = run_all(after, tmp, accelerator=False)
    neuron_after = run_all(after, tmp, accelerator=True)
    return {n: (after[n], cpu_before[n], cpu_after[n], neuron_after[n]) for n in CASES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_safe_fix_is_no_worse_without_an_accelerator_nor_on_neuron(name, outcomes) -> None:
    after, cpu_before, cpu_after, neuron_after = outcomes[name]
    assert "raised" not in cpu_before, cpu_before
    assert cpu_after == cpu_before, f"without an accelerator the fix changed:\n{after}"
    may_differ = CASES[name][1]
    same = {k: v for k, v in neuron_after.items() if k not in may_differ}
    assert same == {k: v for k, v in cpu_before.items() if k not in may_differ}, after


def test_the_device_switch_picks_the_accelerator_after_the_fix(outcomes) -> None:
    assert outcomes["device-switch"][3]["device"] == "neuron"
    assert outcomes["device-default-at-definition"][3]["type"] == "neuron"
    assert outcomes["switch-in-parameter-default"][3]["device"] == "neuron"


@pytest.mark.parametrize(
    ("name", "untouched"),
    [
        ("skip-around-cuda-only-test", "torch.cuda.is_available()"),
        ("assert-before-cuda-only-library", "torch.cuda.is_available()"),
        ("guard-of-review-code", "torch.cuda.is_available()"),
        ("keyword-to-positional-only", "torch.cuda.synchronize(device=d)"),
        ("seeding", "torch.cuda.manual_seed_all(0)"),
        ("device-count-or-fallback", "torch.cuda.device_count() or 1"),
        ("data-parallel-by-count", "torch.cuda.device_count() > 1"),
    ],
)
def test_cuda_by_design_and_unsafe_code_is_left_as_it_was(name, untouched, outcomes) -> None:
    assert untouched in outcomes[name][0]


def test_torch_version_keeps_rewrites_the_project_cannot_run(tmp_path) -> None:
    source = tmp_path / "m.py"
    source.write_text('import torch\nx = torch.zeros(2, device="cuda")\nscaler = 1\n')
    (tmp_path / "pyproject.toml").write_text('[tool.device-agnostic.scan]\ntorch-version = "2.4"\n')
    command = [sys.executable, "-m", "device_agnostic.scan", "--fix", str(source)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1 and "needs torch >= 2.6" in done.stdout, done.stdout
    assert 'device="cuda"' in source.read_text()
    done = subprocess.run([*command, "--torch-version", "2.6"], capture_output=True, text=True)
    assert 'device="cuda"' not in source.read_text(), done.stdout
    bad = subprocess.run([*command, "--torch-version", "two"], capture_output=True, text=True)
    assert bad.returncode == 2 and "expected MAJOR.MINOR" in bad.stderr


# Review rewrites (--unsafe-fixes) may change behaviour, but must never produce code that
# raises where the original ran on CUDA: run here on neuron, the accelerator they are for.
UNSAFE_CASES: dict[str, str] = {
    # litgpt lora.py: `.cuda(weight.device)` became `torch.device("cuda", <a torch.device>)`
    "dot-cuda-of-a-device": (
        "w = torch.ones(1).to(torch.accelerator.current_accelerator())\n"
        "x = torch.ones(2).cuda(w.device)\n"
        "print(json.dumps({'same': x.device == w.device}))\n"
    ),
    "dot-cuda-of-an-index": (
        "rank = 0\n"
        "x = torch.ones(2).cuda(rank)\n"
        "y = torch.nn.Linear(1, 1).cuda(0)\n"
        "print(json.dumps({'same': x.device == y.weight.device}))\n"
    ),
    # a switch whose literal has no rewrite: the guard alone would pick "cuda" on neuron
    "switch-guard-without-its-literal": (
        "def run(device):\n"
        "    return torch.ones(1, device=device).device.type\n"
        "ok = True\n"
        "print(json.dumps({'ran': run('cuda' if torch.cuda.is_available() and ok else 'cpu')}))\n"
    ),
}


def test_an_unsafe_fix_never_produces_code_that_raises_on_the_accelerator(tmp_path) -> None:
    fixed = {}
    for name, body in UNSAFE_CASES.items():
        result = fix_source(f"{name}.py", (PRELUDE + body).encode(), ALL_RULES, unsafe=True)
        assert not result.error, (name, result.error)
        fixed[name] = result.after.decode()
    assert "x = torch.ones(2).to(w.device)" in fixed["dot-cuda-of-a-device"]
    assert "torch.cuda.is_available()" in fixed["switch-guard-without-its-literal"]
    outcomes = run_all(fixed, tmp_path, accelerator=True)
    raised = {name: out["raised"] for name, out in outcomes.items() if "raised" in out}
    assert not raised, raised
    assert outcomes["dot-cuda-of-a-device"] == {"same": True}
    assert outcomes["dot-cuda-of-an-index"] == {"same": True}


def test_counts_that_decide_a_strategy_are_review() -> None:
    """A count handed to a framework that chooses by CUDA (Lightning, accelerate, DeepSpeed) or
    to a `devices=`/`strategy=` keyword is review; a count used for its own sake stays safe."""
    from device_agnostic.scan import scan_source

    def safety(source: str) -> list[str]:
        findings = scan_source("m.py", source.encode())
        return [f.fix_safety for f in findings if "device_count" in f.message]

    assert safety("import torch\nn = torch.cuda.device_count()\n") == ["safe"]
    assert safety("import torch\nt = Trainer(devices=torch.cuda.device_count())\n") == ["review"]
    assert safety("import torch\nt = Trainer(devices=max(1, torch.cuda.device_count()))\n") == [
        "review"
    ]
    assert safety("import lightning as L\nimport torch\nn = torch.cuda.device_count()\n") == [
        "review"
    ]


def test_a_call_a_test_mocks_is_not_rewritten_under_the_test(tmp_path) -> None:
    """litgpt: the rewritten parse_devices no longer reached the test's
    ``mock.patch("litgpt.utils.torch.cuda.device_count")``, and the test failed on every
    machine. A torch.cuda function that a test in the scan mocks is review everywhere; the
    project's tests still pass after ``--fix``."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "utils.py").write_text(
        "import torch\n\n\ndef count():\n    return torch.cuda.device_count()\n"
    )
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_utils.py").write_text(
        "from unittest import mock\n\nfrom pkg.utils import count\n\n\n"
        "def test_count():\n"
        '    with mock.patch("pkg.utils.torch.cuda.device_count", return_value=3):\n'
        "        assert count() == 3\n"
    )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(tmp_path)}
    fix = subprocess.run(
        [sys.executable, "-m", "device_agnostic.scan", "--fix", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *sys.path])},
    )
    assert fix.returncode == 1, fix.stdout + fix.stderr
    assert "torch.cuda.device_count()" in (package / "utils.py").read_text()
    assert "is mocked by a test" in fix.stdout
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:]


def test_the_out_of_memory_error_rewrite_is_the_same_class() -> None:
    """``torch.cuda.OutOfMemoryError`` -> ``torch.OutOfMemoryError`` (safe): one class, so an
    ``except`` catches exactly what it caught (checked on real torch)."""
    from device_agnostic.scan import scan_source

    [finding] = scan_source(
        "m.py", b"try:\n    pass\nexcept torch.cuda.OutOfMemoryError:\n    pass\n"
    )
    assert (finding.replacement, finding.fix_safety) == ("torch.OutOfMemoryError", "safe")
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    check = "import torch; print(torch.cuda.OutOfMemoryError is torch.OutOfMemoryError)"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "True", done.stderr
