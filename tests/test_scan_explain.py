"""Rule documentation: ``da-scan --explain`` and docs/scan-rules.md, both from the rule classes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from device_agnostic.scan import ALL_RULES
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
