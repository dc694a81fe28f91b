"""Rule documentation: ``da-scan --explain`` and docs/scan-rules.md, both from the rule classes."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from device_agnostic.scan import ALL_RULES, scan_source
from device_agnostic.scan.cli import main
from device_agnostic.scan.explain import explain, reference

DOC = Path(__file__).parents[1] / "docs" / "scan-rules.md"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.id)
def test_every_rule_page_has_why_fix_safety_and_a_before_after_example(rule) -> None:
    page = explain(rule)
    assert page.startswith(f"# {rule.id} `{rule.name}`: {rule.summary}")
    assert rule.why in page
    assert f"**Fix.** {rule.fix_safety}:" in page
    before, after = page.index("Before:\n\n```python\n"), page.index("After:\n\n```python\n")
    assert before < after
    assert page.rstrip().endswith("```")
    # The code blocks are dedented: their first line starts at column 0.
    first_code_line = page[after:].split("\n")[3]
    assert first_code_line and not first_code_line.startswith(" ")


def test_explain_prints_the_page_and_rejects_unknown_ids(capsys) -> None:
    assert main(["--explain", "da101"]) == 0
    assert capsys.readouterr().out.startswith("# DA101 ")
    assert main(["--explain", "DA999"]) == 2
    assert "no rule 'DA999'; the rules are DA101" in capsys.readouterr().err


def test_the_rule_reference_in_docs_is_current() -> None:
    assert DOC.read_text() == reference(), (
        "docs/scan-rules.md is stale: regenerate it with "
        "`.venv/bin/python -m device_agnostic.scan.explain > docs/scan-rules.md`"
    )


def test_the_generator_command_writes_the_reference() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "device_agnostic.scan.explain"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert completed.stdout == reference()


def _after_block(rule_id: str) -> str:
    page = explain(next(r for r in ALL_RULES if r.id == rule_id))
    return page.split("After:\n\n```python\n", 1)[1].split("```", 1)[0]


def _run_torch(code: str) -> str:
    """``code`` run by real torch without an accelerator; its stdout."""
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_da110_after_is_the_findings_replacement_and_runs_without_an_accelerator() -> None:
    """The page used to show ``get_default_backend_for_device(current_accelerator())``, a
    TypeError without an accelerator, not the replacement the scanner proposes."""
    finding = next(f for f in scan_source("m.py", b'dist.init_process_group("nccl")\n'))
    after = _after_block("DA110")
    call = ast.parse(after).body[0].value
    assert ast.dump(call.args[0]) == ast.dump(ast.parse(finding.replacement, mode="eval").body)
    # The same code on a machine without an accelerator: "nccl", as the literal it replaces.
    assert _run_torch(f"import torch\nprint({finding.replacement})") == "nccl\n"


def test_da112_replacements_say_what_torch_does() -> None:
    """set_float32_matmul_precision("high") for `= True`, "highest" for `= False`, a read for a
    read, and nothing for cuDNN's switch, which the matmul precision does not change: checked
    against real torch, where the replacement must leave the flags as the original does."""
    source = (
        b"import torch\n"
        b"torch.backends.cuda.matmul.allow_tf32 = True\n"
        b"torch.backends.cuda.matmul.allow_tf32 = False\n"
        b"torch.backends.cudnn.allow_tf32 = False\n"
        b"on = torch.backends.cuda.matmul.allow_tf32\n"
    )
    found = {f.line: f for f in scan_source("m.py", source)}
    assert found[2].replacement == 'torch.set_float32_matmul_precision("high")'
    assert (found[2].line, found[2].end_line, found[2].col) == (2, 2, 1)  # the statement
    assert found[3].replacement == 'torch.set_float32_matmul_precision("highest")'
    assert found[4].replacement == "" and "convolutions" in found[4].message
    read = found[5].replacement
    program = (
        "import torch\n"
        "torch.backends.cudnn.allow_tf32 = False\n"
        f"{found[2].replacement}\n"
        f"print(torch.backends.cuda.matmul.allow_tf32, {read}, torch.backends.cudnn.allow_tf32)\n"
        f"{found[3].replacement}\n"
        f"print(torch.backends.cuda.matmul.allow_tf32, {read})\n"
    )
    assert _run_torch(program) == "True True False\nFalse False\n"
    assert 'set_float32_matmul_precision("high")' in _after_block("DA112")
    assert "convolutions" in explain(next(r for r in ALL_RULES if r.id == "DA112"))
