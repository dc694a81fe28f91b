"""One file: noqa suppressions and inputs that do not parse or decode."""

from __future__ import annotations

import pytest

from device_agnostic.scan import scan_source
from device_agnostic.scan.engine import NOT_UTF8, SYNTAX_ERROR, TOO_LARGE, Limits


def rules_of(source: bytes) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in scan_source("m.py", source)]


def test_noqa_with_the_id_suppresses_only_that_id() -> None:
    source = b'x = torch.zeros(2, device="cuda").cuda()  # noqa: DA102\n'
    assert rules_of(source) == [(1, "DA103")]


def test_bare_noqa_suppresses_everything_on_the_line() -> None:
    assert rules_of(b"torch.cuda.synchronize()  # noqa\ntorch.cuda.synchronize()\n") == [
        (2, "DA101")
    ]


def test_noqa_lists_are_case_insensitive_and_comma_separated() -> None:
    assert rules_of(b"torch.cuda.synchronize()  # NOQA:DA102,da101\n") == []


def test_syntax_error_is_a_finding_with_its_position() -> None:
    [finding] = scan_source("bad.py", b"x = 1\ndef f(:\n")
    assert (finding.rule, finding.line, finding.kind) == (SYNTAX_ERROR, 2, "finding")
    assert "syntax error" in finding.message


def test_null_bytes_are_a_syntax_error_not_a_crash() -> None:
    [finding] = scan_source("bad.py", b"x = 1\0\n")
    assert finding.rule == SYNTAX_ERROR


def test_invalid_utf8_is_reported_with_its_line() -> None:
    [finding] = scan_source("latin.py", b"x = 1\ns = '\xe9'\n")
    assert (finding.rule, finding.line) == (NOT_UTF8, 2)


def test_declared_encoding_is_honoured() -> None:
    source = b"# -*- coding: latin-1 -*-\ns = '\xe9'\ntorch.cuda.synchronize()\n"
    assert rules_of(source) == [(3, "DA101")]


def test_unknown_declared_encoding_is_reported() -> None:
    [finding] = scan_source("m.py", b"# -*- coding: klingon -*-\nx = 1\n")
    assert finding.rule == NOT_UTF8


@pytest.mark.slow
def test_huge_file_is_scanned_when_the_limit_allows() -> None:
    body = b"x = torch.zeros(1)\n" * 200_000 + b"torch.cuda.synchronize()\n"
    found = scan_source("m.py", body, limits=Limits(max_bytes=0))
    assert [(f.line, f.rule) for f in found] == [(200_001, "DA101")]


def test_files_over_the_limits_are_skipped_with_the_reason() -> None:
    limits = Limits(max_bytes=1000, max_line=100)
    [big] = scan_source("big.py", b"torch.cuda.synchronize()\n" * 50, limits=limits)
    assert big.rule == TOO_LARGE and big.kind == "finding"
    assert "1,250 bytes, over --max-file-size 1,000" in big.message
    long_line = b"x = 1\ny = [" + b"1," * 60 + b"]\ntorch.cuda.synchronize()\n"
    [wide] = scan_source("wide.py", long_line, limits=limits)
    assert (wide.rule, wide.line) == (TOO_LARGE, 2)
    assert "line 2 is 126 bytes long, over --max-line-length 100" in wide.message
    # at the limits, and with no limits: scanned
    assert rules_of(long_line) == [(3, "DA101")]
    unlimited = scan_source("wide.py", long_line, limits=Limits(max_bytes=0, max_line=0))
    assert [f.rule for f in unlimited] == ["DA101"]
    exact = b"torch.cuda.synchronize()\n"
    assert rules_of(exact) == [(1, "DA101")]
    assert [f.rule for f in scan_source("m.py", exact, limits=Limits(len(exact), 24))] == ["DA101"]


def test_deep_nesting_is_reported_not_raised() -> None:
    findings = scan_source("deep.py", b"x = " + b"(" * 5000 + b"1" + b")" * 5000 + b"\n")
    assert [f.rule for f in findings] == [SYNTAX_ERROR]
