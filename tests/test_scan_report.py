"""Output formats: text grouped by file, JSON that round-trips, SARIF 2.1.0, GitHub."""

from __future__ import annotations

import io
import json

import pytest

from device_agnostic.scan import Finding, scan_source
from device_agnostic.scan.engine import input_diagnostic
from device_agnostic.scan.report import read_json, sarif, write

SOURCE = b'import torch\ntorch.cuda.synchronize()\nx = torch.zeros(1, device="cuda")\n'


@pytest.fixture
def findings() -> list[Finding]:
    return [
        *scan_source("b/m.py", SOURCE),
        *scan_source("a/n.py", b"x.cuda()\n"),
        input_diagnostic("a/pipe.py", "DA903", "not a regular file"),
    ]


def render(findings: list[Finding], fmt: str) -> str:
    stream = io.StringIO()
    write(findings, fmt, stream)
    return stream.getvalue()


def test_text_groups_by_file_without_colour_off_a_terminal(findings) -> None:
    text = render(findings, "text")
    assert "\x1b[" not in text
    lines = text.splitlines()
    assert lines[0] == "a/n.py" and "b/m.py" in lines
    assert "  2:1  DA101 " in text and "-> torch.accelerator.synchronize  [safe]" in text
    assert lines[-1] == "Found 3 findings (3 with a safe rewrite) and 1 unreadable input."


def test_text_is_coloured_when_forced(findings, monkeypatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert "\x1b[33mDA101\x1b[0m" in render(findings, "text")


def test_clean_text_says_so() -> None:
    assert render([], "text") == "All checks passed.\n"


def test_json_round_trips(findings) -> None:
    assert read_json(render(findings, "json")) == sorted(findings)


def test_sarif_has_the_required_structure(findings) -> None:
    log = json.loads(render(findings, "sarif"))
    assert log == sarif(findings)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    [run] = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "da-scan"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert len(run["results"]) == len(findings)
    for result in run["results"]:
        assert {"ruleId", "level", "message", "locations"} <= set(result)
        assert rule_ids[result["ruleIndex"]] == result["ruleId"]
        assert result["level"] in ("warning", "error") and result["message"]["text"]
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"]
        assert location["region"]["startLine"] >= 1 and location["region"]["startColumn"] >= 1
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"]


def test_github_annotations(findings) -> None:
    lines = render(findings, "github").splitlines()
    assert len(lines) == len(findings)
    assert lines[1].startswith("::error file=a/pipe.py,line=1,col=1")
    warning = next(line for line in lines if "DA101" in line)
    assert warning.startswith("::warning file=b/m.py,line=2,col=1,endLine=2,")
    assert "::DA101 " in warning


def test_github_escapes_newlines_and_separators() -> None:
    finding = Finding("a,b:c.py", 1, 1, "DA901", "line one\nline two 100%")
    [line] = render([finding], "github").splitlines()
    assert "file=a%2Cb%3Ac.py" in line and line.endswith("line one%0Aline two 100%25")
