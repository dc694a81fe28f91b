"""Write findings as text (grouped by file), JSON, SARIF 2.1.0 or GitHub annotations."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from itertools import groupby
from typing import TextIO

from .engine import INPUT_DIAGNOSTICS
from .rules import ALL_RULES, Finding

FORMATS = ("text", "json", "sarif", "github")
TOOL_URI = "https://github.com/device-agnostic/device-agnostic"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

_RULES = {rule.id: rule for rule in ALL_RULES}


def use_colour(stream: TextIO) -> bool:
    """Colour on a terminal unless NO_COLOR is set; FORCE_COLOR forces it (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


def write(findings: Sequence[Finding], fmt: str, stream: TextIO) -> None:
    writer = {"text": write_text, "json": write_json, "sarif": write_sarif, "github": write_github}[
        fmt
    ]
    writer(findings, stream)


def write_text(findings: Sequence[Finding], stream: TextIO) -> None:
    colour = use_colour(stream)

    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour else text

    for path, group in groupby(sorted(findings), key=lambda f: f.path):
        stream.write(paint(path, "1") + "\n")
        for f in group:
            code = paint(f.rule, "31" if f.kind == "error" else "33")
            stream.write(f"  {f.line}:{f.col}  {code} {f.message}\n")
            if f.replacement:
                stream.write(paint(f"      -> {f.replacement}  [{f.fix_safety}]", "2") + "\n")
    stream.write(summary(findings) + "\n")


def summary(findings: Sequence[Finding]) -> str:
    errors = sum(f.kind == "error" for f in findings)
    found = len(findings) - errors
    safe = sum(f.fix_safety == "safe" for f in findings)
    if not findings:
        return "All checks passed."
    text = f"Found {found} finding{'s' * (found != 1)} ({safe} with a safe rewrite)"
    if errors:
        text += f" and {errors} unreadable input{'s' * (errors != 1)}"
    return text + "."


def write_json(findings: Sequence[Finding], stream: TextIO) -> None:
    json.dump([f.to_dict() for f in sorted(findings)], stream, indent=2)
    stream.write("\n")


def read_json(text: str) -> list[Finding]:
    return [Finding.from_dict(item) for item in json.loads(text)]


def _rule_descriptor(rule_id: str) -> dict:
    rule = _RULES.get(rule_id)
    if rule is None:
        text = INPUT_DIAGNOSTICS.get(rule_id, rule_id)
        return {"id": rule_id, "shortDescription": {"text": text}}
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": rule.why},
        "help": {"text": f"{rule.why}\n{(rule.__doc__ or '').strip()}"},
        "properties": {"fix_safety": rule.fix_safety},
    }


def sarif(findings: Sequence[Finding]) -> dict:
    """The SARIF 2.1.0 log of ``findings`` (one run; rules for every id that occurs)."""
    ids = sorted({f.rule for f in findings} | set(_RULES))
    index = {rule_id: i for i, rule_id in enumerate(ids)}
    results = []
    for f in sorted(findings):
        region = {"startLine": f.line, "startColumn": f.col}
        if f.end_line:
            region.update(endLine=f.end_line, endColumn=f.end_col)
        result = {
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": "error" if f.kind == "error" else "warning",
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.path.replace(os.sep, "/")},
                        "region": region,
                    }
                }
            ],
        }
        if f.replacement:
            result["properties"] = {"replacement": f.replacement, "fix_safety": f.fix_safety}
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "da-scan",
                        "informationUri": TOOL_URI,
                        "rules": [_rule_descriptor(rule_id) for rule_id in ids],
                    }
                },
                "results": results,
            }
        ],
    }


def write_sarif(findings: Sequence[Finding], stream: TextIO) -> None:
    json.dump(sarif(findings), stream, indent=2)
    stream.write("\n")


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def write_github(findings: Sequence[Finding], stream: TextIO) -> None:
    """GitHub Actions workflow commands: one ``::warning``/``::error`` annotation per finding."""
    for f in sorted(findings):
        level = "error" if f.kind == "error" else "warning"
        props = f"file={_escape_property(f.path)},line={f.line},col={f.col}"
        if f.end_line:
            props += f",endLine={f.end_line},endColumn={f.end_col}"
        props += f",title={_escape_property(f.rule)}"
        message = f"{f.rule} {f.message}"
        if f.replacement:
            message += f" (use {f.replacement}; {f.fix_safety})"
        stream.write(f"::{level} {props}::{_escape_data(message)}\n")
