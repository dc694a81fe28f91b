"""da-scan --fix / --diff: expected rewrites, idempotence, refusal, files never damaged."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from device_agnostic.scan import ALL_RULES, scan_source
from device_agnostic.scan.cli import main
from device_agnostic.scan.fix import FIXABLE_RULES, fix_file, fix_source
from device_agnostic.scan.rules import devices

FIX_FIXTURES = Path(__file__).parent / "scan_fix_fixtures"
SCAN_FIXTURES = Path(__file__).parent / "scan_fixtures"
INPUTS = sorted(p for p in FIX_FIXTURES.glob("*.py") if p.name.count(".") == 1)
ALL_INPUTS = INPUTS + sorted(SCAN_FIXTURES.glob("*.py"))


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copyfile(source, target)
    return target


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
@pytest.mark.parametrize("fixture", INPUTS, ids=lambda p: p.stem)
def test_fix_gives_the_expected_file(fixture: Path, unsafe: bool, tmp_path: Path) -> None:
    expected = fixture.with_name(fixture.stem + (".unsafe.py" if unsafe else ".fixed.py"))
    target = _copy(fixture, tmp_path)
    result = fix_file(str(target), ALL_RULES, unsafe)
    assert not result.error
    assert target.read_bytes() == expected.read_bytes()
    compile(target.read_bytes(), str(target), "exec")


@pytest.mark.parametrize("unsafe", [False, True], ids=["safe", "unsafe"])
@pytest.mark.parametrize("fixture", ALL_INPUTS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_second_fix_changes_nothing(fixture: Path, unsafe: bool) -> None:
    first = fix_source(str(fixture), fixture.read_bytes(), ALL_RULES, unsafe)
    assert not first.error
    compile(first.after, str(fixture), "exec")
    second = fix_source(str(fixture), first.after, ALL_RULES, unsafe)
    assert (second.fixed, second.after, second.error) == (0, first.after, "")


def test_every_fixable_rule_has_a_builder() -> None:
    from device_agnostic.scan.fix_edits import BUILDERS

    assert set(BUILDERS) == FIXABLE_RULES
    assert FIXABLE_RULES <= {rule.id for rule in ALL_RULES}


def test_formatting_comments_and_noqa_survive() -> None:
    fixed = (FIX_FIXTURES / "api.unsafe.py").read_text()
    assert "if torch.accelerator.is_available():  # keep this comment\n" in fixed
    assert "        0,  # the first device\n" in fixed
    assert "    torch.cuda.synchronize()  # noqa: DA101\n" in fixed
    assert "    torch.cuda.empty_cache()  # noqa\n" in fixed
    assert "torch.cuda.synchronize = lambda: None\n" in fixed  # a store is not a use


def test_fixes_apply_the_scanners_replacement() -> None:
    source = b"import torch\nx = torch.zeros(2).cuda()\ny = x.to('cuda:2')\n"
    findings = scan_source("m.py", source)
    fixed = fix_source("m.py", source, ALL_RULES, unsafe=False).after.decode()
    for finding in findings:
        assert finding.replacement in fixed


def test_alias_and_non_ascii_columns() -> None:
    fixed = (FIX_FIXTURES / "alias.fixed.py").read_text()
    assert 'label = "é ü"; t.accelerator.synchronize()\n' in fixed
    assert "torch" not in fixed.replace("import torch as t", "")


@pytest.mark.parametrize(
    ("source", "fixed"),
    [
        (  # an optional import at module level is a module-level binding: used, none added
            "try:\n    import torch\nexcept ImportError:\n    torch = None\nx = y.cuda()\n",
            "try:\n    import torch\nexcept ImportError:\n    torch = None\n"
            "x = y.to(torch.accelerator.current_accelerator())\n",
        ),
        (  # a lazy import inside a function: a top-level one would defeat it, so no rewrite
            "def f():\n    import torch\n    torch.cuda.synchronize()\n",
            None,
        ),
        (  # torch.nn as nn binds nn only: import torch is added
            "import torch.nn as nn\nx = nn.Linear(1, 1).cuda()\n",
            "import torch.nn as nn\nimport torch\n\n"
            "x = nn.Linear(1, 1).to(torch.accelerator.current_accelerator())\n",
        ),
    ],
    ids=["optional", "lazy", "submodule-alias"],
)
def test_where_torch_comes_from(source: str, fixed: str | None) -> None:
    after = fix_source("m.py", source.encode(), ALL_RULES, unsafe=True).after.decode()
    assert after == (fixed or source)


def test_crlf_line_endings_are_kept() -> None:
    source = b"import torch\r\nx = torch.zeros(2).cuda()\r\n"
    after = fix_source("m.py", source, ALL_RULES, unsafe=False).after
    assert (
        after
        == b"import torch\r\nx = torch.zeros(2).to(torch.accelerator.current_accelerator())\r\n"
    )


def test_ignored_rules_are_not_fixed(tmp_path: Path) -> None:
    target = tmp_path / "m.py"
    target.write_text("import torch\ntorch.cuda.synchronize()\nx = y.cuda()\n")
    assert main([str(target), "--fix", "--ignore", "DA102"]) == 0
    assert target.read_text() == "import torch\ntorch.accelerator.synchronize()\nx = y.cuda()\n"


def test_diff_prints_and_writes_nothing(tmp_path: Path, capsys) -> None:
    target = _copy(FIX_FIXTURES / "devices.py", tmp_path)
    before = target.read_bytes()
    assert main([str(target), "--diff"]) == 1
    out, err = capsys.readouterr()
    assert target.read_bytes() == before
    assert f"--- a/{target}\n+++ b/{target}\n" in out
    assert "-    .cuda()\n+    .to(torch.accelerator.current_accelerator())\n" in out
    assert "Would fix 5 findings in 1 file" in err
    assert main([str(FIX_FIXTURES / "shadowed.py"), "--diff"]) == 0


def test_fix_exit_status_and_summary(tmp_path: Path, capsys) -> None:
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\ntorch.cuda.synchronize()\n")
    assert main([str(clean), "--fix"]) == 0
    assert "Fixed 1 finding in 1 file (0 remaining; 0 more with --unsafe-fixes)" in (
        capsys.readouterr().out
    )
    _copy(FIX_FIXTURES / "devices.py", tmp_path)
    assert main([str(tmp_path / "devices.py"), "--fix"]) == 1
    out = capsys.readouterr().out
    # "more with --unsafe-fixes" is an upper bound: it counts `.cuda(device=1)`, left anyway
    assert "Fixed 5 findings in 1 file (4 remaining; 4 more with --unsafe-fixes)" in out
    assert "devices.py\n  10:5  DA102" in out  # the remaining findings, at their new lines


def test_json_report_stays_json(tmp_path: Path, capsys) -> None:
    target = _copy(FIX_FIXTURES / "devices.py", tmp_path)
    assert main([str(target), "--fix", "--unsafe-fixes", "--format", "json"]) == 1
    out, err = capsys.readouterr()
    assert [item["rule"] for item in json.loads(out)] == ["DA102"]
    assert "Fixed 8 findings in 1 file (1 remaining)" in err


def test_a_fix_that_would_not_compile_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    # A scanner whose replacement is valid as an expression but not where it lands: `yield`
    # outside a function parses, and only compile() rejects it.
    monkeypatch.setattr(devices, "generic_device", lambda literal: "(yield)")
    target = tmp_path / "m.py"
    target.write_text('import torch\nx = torch.zeros(2, device="cuda")  # keep\n')
    target.chmod(0o640)
    before, mtime = target.read_bytes(), target.stat().st_mtime_ns
    assert main([str(target), "--fix"]) == 2
    out, err = capsys.readouterr()
    assert "m.py: not fixed: the rewrite would not compile (SyntaxError" in err
    assert "DA103" in out and "Fixed 0 findings in 0 files" in out
    assert (target.read_bytes(), target.stat().st_mtime_ns) == (before, mtime)
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]  # no temporary file left


@pytest.mark.parametrize(
    "data",
    [b"import torch\nx = '\xff'\ntorch.cuda.synchronize()\n", b"torch.cuda.synchronize(\n"],
    ids=["not-utf8", "syntax-error"],
)
def test_unreadable_sources_are_never_modified(tmp_path: Path, data: bytes) -> None:
    target = tmp_path / "bad.py"
    target.write_bytes(data)
    assert main([str(target), "--fix", "--unsafe-fixes"]) == 1
    assert target.read_bytes() == data


def test_mode_and_symlink_are_kept(tmp_path: Path) -> None:
    target = tmp_path / "m.py"
    target.write_text("x = y.cuda()\n")
    target.chmod(0o751)
    link = tmp_path / "link.py"
    link.symlink_to("m.py")
    result = fix_file(str(link), ALL_RULES, unsafe=False)
    assert result.fixed == 1 and not result.error
    assert link.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    fixed = "import torch\n\nx = y.to(torch.accelerator.current_accelerator())\n"
    assert target.read_text() == fixed


def test_fix_from_the_command_line(tmp_path: Path) -> None:
    for fixture in INPUTS:
        _copy(fixture, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "device_agnostic.scan", "--fix", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    assert "Fixed 15 findings in 5 files" in result.stdout, result.stdout
    for fixture in INPUTS:
        expected = fixture.with_name(fixture.stem + ".fixed.py").read_bytes()
        assert (tmp_path / fixture.name).read_bytes() == expected, fixture.name


def test_libcst_is_loaded_only_for_files_with_something_to_fix(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import torch\ntorch.backends.cudnn.deterministic = True\n")
    code = (
        "import sys\nfrom device_agnostic.scan.cli import main\n"
        f"status = main([{str(tmp_path)!r}, '--fix', '--unsafe-fixes'])\n"
        "print(status, 'libcst' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.stdout.splitlines()[-1] == "1 False", result.stdout + result.stderr


def test_temporary_file_is_removed_when_the_write_fails(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "m.py"
    target.write_text("x = y.cuda()\n")

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    result = fix_file(str(target), ALL_RULES, unsafe=False)
    assert result.error == "not fixed: cannot write: No space left on device"
    assert result.fixed == 0 and not result.changed
    assert target.read_text() == "x = y.cuda()\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]
