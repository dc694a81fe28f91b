"""da-scan end to end: exit status, formats, configuration and every core."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from device_agnostic.scan.cli import main
from device_agnostic.scan.parallel import scan_files

FIXTURES = Path(__file__).parent / "scan_fixtures"


def test_clean_code_exits_0(tmp_path: Path, capsys) -> None:
    (tmp_path / "ok.py").write_text("x = 1\n")
    assert main([str(tmp_path)]) == 0
    assert "All checks passed." in capsys.readouterr().out


def test_findings_exit_1(capsys) -> None:
    assert main([str(FIXTURES / "DA101.py"), "--format", "json"]) == 1
    # DA101.py also holds a negated guard next to a "cuda" comparison (DA107)
    assert {item["rule"] for item in json.loads(capsys.readouterr().out)} == {"DA101", "DA107"}


def test_syntax_error_exits_1_and_the_scan_continues(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.py").write_text("def f(:\n")
    (tmp_path / "ok.py").write_text("torch.cuda.synchronize()\n")
    assert main([str(tmp_path), "--format", "json"]) == 1
    rules = sorted(item["rule"] for item in json.loads(capsys.readouterr().out))
    assert rules == ["DA101", "DA901"]


def test_unreadable_input_exits_2_and_the_rest_is_still_reported(tmp_path: Path, capsys) -> None:
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "m.py").write_text("x.cuda()\n")
    os.symlink("loop.py", tmp_path / "loop.py")
    assert main([str(tmp_path), "--format", "json"]) == 2
    rules = sorted(item["rule"] for item in json.loads(capsys.readouterr().out))
    assert rules == ["DA102", "DA903", "DA904"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_file_without_read_permission_exits_2(tmp_path: Path) -> None:
    target = tmp_path / "secret.py"
    target.write_text("x = 1\n")
    target.chmod(0)
    assert main([str(target)]) == 2


def test_usage_error_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--format", "xml", "."])
    assert exit_info.value.code == 2


def test_cli_select_ignore_exclude(tmp_path: Path, capsys) -> None:
    (tmp_path / "m.py").write_text('x.cuda()\ntorch.cuda.synchronize()\ny.to("cuda")\n')
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "g.py").write_text("x.cuda()\n")

    def rules(*args: str) -> list[str]:
        main([str(tmp_path), "--format", "json", *args])
        return sorted(item["rule"] for item in json.loads(capsys.readouterr().out))

    assert rules() == ["DA101", "DA102", "DA102", "DA103"]
    assert rules("--select", "DA101,DA103") == ["DA101", "DA103"]
    assert rules("--ignore", "DA102") == ["DA101", "DA103"]
    assert rules("--exclude", "gen") == ["DA101", "DA102", "DA103"]


@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_an_unknown_rule_id_is_a_usage_error_with_a_suggestion(
    tmp_path: Path, capsys, option: str
) -> None:
    """A typo in --select used to turn every rule off ("All checks passed.", exit 0)."""
    (tmp_path / "m.py").write_text("x.cuda()\n")
    assert main([str(tmp_path), option, "DA102,DA1O3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{option}: unknown rule id 'DA1O3' (did you mean DA103?)" in captured.err
    assert "DA101, DA102" in captured.err and "DA904" in captured.err
    assert main([str(tmp_path), option, "E501"]) == 2
    assert "'E501';" in capsys.readouterr().err  # nothing near: no suggestion
    assert main([str(tmp_path), option, "da1,DA9"]) in (0, 1)  # prefixes, any case


def test_an_unknown_rule_id_in_pyproject_is_a_usage_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.device-agnostic.scan]\nselect = ["DA10"]\n')
    (tmp_path / "m.py").write_text("x.cuda()\n")
    assert main([str(tmp_path)]) == 1
    capsys.readouterr()
    (tmp_path / "pyproject.toml").write_text('[tool.device-agnostic.scan]\nignore = ["DA1022"]\n')
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "pyproject.toml: [tool.device-agnostic.scan] ignore: unknown rule id 'DA1022'" in err
    assert "did you mean DA102" in err


def test_version_matches_the_distribution(capsys) -> None:
    import tomllib

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert capsys.readouterr().out == f"da-scan {version}\n"


def test_pyproject_configuration_applies(tmp_path: Path, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.device-agnostic.scan]\nignore = ["DA101"]\nexclude = ["gen"]\n'
    )
    (tmp_path / "m.py").write_text("x.cuda()\ntorch.cuda.synchronize()\n")
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "g.py").write_text("x.cuda()\n")
    assert main([str(tmp_path), "--format", "json"]) == 1
    assert [item["rule"] for item in json.loads(capsys.readouterr().out)] == ["DA102"]


def test_bad_configuration_exits_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.device-agnostic.scan]\nselect = "DA1"\n')
    assert main([str(tmp_path)]) == 2
    assert "must be a list" in capsys.readouterr().err


def test_selection_never_hides_an_unparsed_file(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.py").write_text("def f(:\n")
    assert main([str(tmp_path), "--select", "DA101", "--format", "json"]) == 1
    assert [item["rule"] for item in json.loads(capsys.readouterr().out)] == ["DA901"]


def test_pool_finds_what_one_process_finds(tmp_path: Path) -> None:
    paths = []
    for i in range(80):
        path = tmp_path / f"m{i}.py"
        path.write_text("x.cuda()\n" * (i % 3) + ("def f(:\n" if i == 7 else ""))
        paths.append(str(path))
    rule_ids = ["DA102"]
    assert sorted(scan_files(paths, rule_ids, jobs=4)) == sorted(scan_files(paths, rule_ids, 1))


def test_python_dash_m_and_console_script(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x.cuda()\n")
    module = subprocess.run(
        [sys.executable, "-m", "device_agnostic.scan", str(tmp_path), "--format", "github"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert module.returncode == 1 and module.stdout.startswith("::warning file=")
    script = Path(sys.executable).with_name("da-scan")
    if script.exists():
        result = subprocess.run([str(script), str(tmp_path)], capture_output=True, check=False)
        assert result.returncode == 1


def test_input_diagnostics_are_hidden_only_when_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "bad.py").write_text("def f(:\n")
    assert main([str(tmp_path), "--ignore", "DA", "--format", "json"]) == 1
    assert [item["rule"] for item in json.loads(capsys.readouterr().out)] == ["DA901"]
    assert main([str(tmp_path), "--ignore", "DA901", "--format", "json"]) == 0


# Peak RSS of one da-scan run, measured by the process itself: VmHWM, the high-water mark of its
# own memory (ru_maxrss keeps the forking test process's peak across exec on Linux).
_PEAK_RSS = (
    "import re, sys\n"
    "from device_agnostic.scan.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "status = open('/proc/self/status').read()\n"
    "print('peak_kib', re.search(r'VmHWM:\\s+(\\d+)', status).group(1), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _peak_rss_mib(*args: str) -> tuple[int, str, float]:
    completed = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, "--format", "json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    peak = int(completed.stderr.rsplit("peak_kib", 1)[1].split()[0])
    return completed.returncode, completed.stdout, peak / 1024


def test_a_20_mb_generated_line_is_skipped_not_parsed_into_gigabytes(tmp_path: Path) -> None:
    """A 20 MB one-line file took 3.9 GB and minutes (CPython's AST); it is now skipped with
    the reason, by the size limit without being read, and by the line limit when the size
    limit is off. The measured peaks are in docs/scan-safety.md."""
    generated = tmp_path / "table.py"
    with generated.open("w") as stream:
        stream.write("TABLE = [")
        stream.write(",".join(str(i % 1000) for i in range(5_000_000)))
        stream.write("]  # torch.cuda\n")
    assert generated.stat().st_size > 19_000_000
    for args, reason in (
        ((), "over --max-file-size 2,097,152"),
        (("--max-file-size", "0"), "line 1 is 19,"),
    ):
        code, out, peak_mib = _peak_rss_mib(str(generated), *args)
        [finding] = json.loads(out)
        assert (code, finding["rule"]) == (1, "DA905"), out
        assert reason in finding["message"]
        assert peak_mib < 200, f"{peak_mib:.0f} MiB for a skipped file ({args})"


def test_limits_from_the_command_line_and_pyproject(tmp_path: Path, capsys) -> None:
    (tmp_path / "m.py").write_text("torch.cuda.synchronize()\n" * 100)
    assert main([str(tmp_path), "--format", "json"]) == 1
    assert {f["rule"] for f in json.loads(capsys.readouterr().out)} == {"DA101"}
    assert main([str(tmp_path), "--format", "json", "--max-file-size", "1k"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)] == ["DA905"]
    assert main([str(tmp_path), "--max-line-length", "lots"]) == 2
    assert "--max-line-length: expected a number of bytes" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text(
        '[tool.device-agnostic.scan]\nmax-file-size = "1k"\nmax-line-length = 0\n'
    )
    assert main([str(tmp_path), "--format", "json"]) == 1
    assert [f["rule"] for f in json.loads(capsys.readouterr().out)] == ["DA905"]
    assert main([str(tmp_path), "--format", "json", "--max-file-size", "0"]) == 1
    assert {f["rule"] for f in json.loads(capsys.readouterr().out)} == {"DA101"}
    assert (
        main([str(tmp_path), "--format", "json", "--ignore", "DA905", "--max-file-size", "1k"]) == 0
    )
    capsys.readouterr()
    (tmp_path / "pyproject.toml").write_text("[tool.device-agnostic.scan]\nmax-file-size = -1\n")
    assert main([str(tmp_path)]) == 2
    assert "max-file-size: expected a number of bytes" in capsys.readouterr().err


def test_fix_honours_the_size_limit(tmp_path: Path, capsys) -> None:
    """A file the scan skips is never rewritten; raising the limit fixes it."""
    target = tmp_path / "m.py"
    target.write_text("import torch\n" + "x = torch.zeros(2).cuda()\n" * 100)
    before = target.read_text()
    assert main([str(target), "--fix", "--max-file-size", "1k"]) == 1
    assert "DA905" in capsys.readouterr().out
    assert target.read_text() == before
    assert main([str(target), "--fix", "--max-file-size", "1M"]) == 0
    assert ".cuda()" not in target.read_text()
