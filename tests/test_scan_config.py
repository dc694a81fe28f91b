"""[tool.device-agnostic.scan]: select, ignore and exclude, found upward from the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from device_agnostic.scan.config import Config, ConfigError, find_pyproject, load_config
from device_agnostic.scan.rules import ALL_RULES


def write_project(root: Path, table: str) -> Path:
    (root / "pyproject.toml").write_text(f"[tool.device-agnostic.scan]\n{table}\n")
    (root / "src" / "pkg").mkdir(parents=True)
    return root / "src" / "pkg"


def test_pyproject_is_found_upward(tmp_path: Path) -> None:
    inner = write_project(tmp_path, 'select = ["DA101"]')
    assert find_pyproject(str(inner)) == str(tmp_path / "pyproject.toml")
    assert load_config(str(inner / "m.py")).select == ["DA101"]


def test_no_pyproject_means_defaults(tmp_path: Path) -> None:
    config = load_config(str(tmp_path))
    assert config.source in (None, find_pyproject(str(tmp_path)))


def test_select_and_ignore_take_prefixes_and_the_longer_wins() -> None:
    config = Config(select=["DA1"], ignore=["DA10"])
    assert not config.enabled("DA101") and config.enabled("DA111")
    config = Config(select=["DA101"], ignore=["DA1"])
    assert config.enabled("DA101") and not config.enabled("DA102")
    opt_in = sum(rule.opt_in for rule in ALL_RULES)
    assert len(Config(ignore=["DA110"]).rules()) == len(ALL_RULES) - 1 - opt_in


def test_an_opt_in_rule_runs_only_when_selected_by_its_id() -> None:
    assert "DA190" not in {r.id for r in Config().rules()}
    assert "DA190" not in {r.id for r in Config(select=["DA1"]).rules()}
    assert "DA190" in {r.id for r in Config(select=["DA1", "DA190"]).rules()}


@pytest.mark.parametrize(
    "table", ['select = "DA101"', "ignore = [1]", 'unknown = ["x"]', "select = ["]
)
def test_invalid_configuration_names_the_file(tmp_path: Path, table: str) -> None:
    write_project(tmp_path, table)
    with pytest.raises(ConfigError, match="pyproject.toml"):
        load_config(str(tmp_path))
