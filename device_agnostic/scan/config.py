"""Settings from ``[tool.device-agnostic.scan]`` in the nearest pyproject.toml.

::

    [tool.device-agnostic.scan]
    select = ["DA1"]          # ids or id prefixes; default: every rule
    ignore = ["DA109"]
    exclude = ["third_party", "tests/fixtures/*"]
    max-file-size = 2097152   # bytes; a larger file is skipped (DA905), 0: no limit
    max-line-length = 20000   # bytes; a file with a longer line is skipped (DA905), 0: no limit

The file is looked for upward from the first path scanned. Command-line ``--select`` replaces
the configured list; ``--ignore`` and ``--exclude`` add to it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .engine import DEFAULT_LIMITS, INPUT_DIAGNOSTICS, Limits
from .rules import ALL_RULES, Rule
from .versions import parse_version

# Every id select/ignore may name (rules and input diagnostics); an entry is valid when it is
# one of them or a prefix of one ("DA1", "DA9").
KNOWN_IDS: tuple[str, ...] = (*(rule.id for rule in ALL_RULES), *INPUT_DIAGNOSTICS)


class ConfigError(ValueError):
    """The configuration is invalid; the message names the file and the key."""


@dataclass
class Config:
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    source: str | None = None
    torch_version: tuple[int, int] | None = None  # the oldest torch the project supports
    limits: Limits = DEFAULT_LIMITS  # files and lines larger than these are skipped, not parsed

    def enabled(self, rule_id: str) -> bool:
        """Whether ``rule_id`` is reported: selected (or no selection) and not ignored; the
        longer matching prefix wins, as in ruff (``select=["DA1"], ignore=["DA10"]``)."""
        selected = _longest_prefix(rule_id, self.select) if self.select else 0
        ignored = _longest_prefix(rule_id, self.ignore)
        if self.select and selected < 0:
            return False
        return ignored < 0 or selected > ignored

    def rules(self, rules: Sequence[Rule] = ALL_RULES) -> list[Rule]:
        """The rules to run: enabled ones, an opt-in rule only when selected by its full id."""
        named = {p.upper() for p in self.select}
        return [
            rule
            for rule in rules
            if self.enabled(rule.id) and (not rule.opt_in or rule.id in named)
        ]


def unknown_rule_ids(entries: Iterable[str], where: str) -> str:
    """The error for the entries of ``where`` (``--select``, a pyproject key) that name no rule,
    or "". A typo must not pass silently: an unknown id in ``select`` would turn every rule off
    and report "All checks passed." (a CI check that can no longer fail)."""
    problems = []
    for entry in entries:
        upper = entry.upper()
        if any(known.startswith(upper) for known in KNOWN_IDS):
            continue
        close = _near_misses(upper)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        problems.append(f"{entry!r}{hint}")
    if not problems:
        return ""
    return (
        f"{where}: unknown rule id {', '.join(problems)}; the known ids are "
        f"{', '.join(KNOWN_IDS)} (or a prefix of them, such as DA1)"
    )


def _near_misses(entry: str) -> list[str]:
    """The known ids ``entry`` most likely meant: a letter typed for a digit (``DA1O1``) first,
    then the closest spellings (difflib), best first, ties in id order."""
    head, tail = entry[:2], entry[2:]
    digits = tail.translate(str.maketrans("OILS", "0115"))
    if digits != tail and any(known.startswith(head + digits) for known in KNOWN_IDS):
        return [head + digits]
    scored = [(difflib.SequenceMatcher(None, entry, known).ratio(), known) for known in KNOWN_IDS]
    best = sorted((s for s in scored if s[0] >= 0.7), key=lambda s: -s[0])
    return [known for _, known in best[:3]]


def _longest_prefix(rule_id: str, prefixes: Iterable[str]) -> int:
    lengths = [len(p) for p in prefixes if rule_id.startswith(p.upper())]
    return max(lengths, default=-1)


_LIMIT_KEYS = {"max-file-size": "max_bytes", "max-line-length": "max_line"}


def parse_size(value: object) -> int:
    """A byte count: an integer, or a string such as "4M", "500k" (powers of 1024); 0 is no
    limit. ValueError on anything else."""
    if isinstance(value, bool):
        raise ValueError(f'expected a number of bytes (such as 2097152 or "2M"), got {value!r}')
    if isinstance(value, int) and value >= 0:
        return value
    text = str(value).strip().lower()
    scale = {"k": 1024, "m": 1024**2, "g": 1024**3}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    if isinstance(value, str) and number.isdigit():
        return int(number) * scale
    raise ValueError(f'expected a number of bytes (such as 2097152 or "2M"), got {value!r}')


def find_pyproject(start: str) -> str | None:
    """The nearest pyproject.toml at or above ``start`` (a file or a directory)."""
    directory = os.path.abspath(start)
    if not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def load_config(start: str) -> Config:
    """The configuration that applies to ``start``; defaults when there is none."""
    path = find_pyproject(start)
    if path is None:
        return Config()
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    table = data.get("tool", {}).get("device-agnostic", {}).get("scan", {})
    config = Config(source=path)
    for key in ("select", "ignore", "exclude"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f"{path}: [tool.device-agnostic.scan] {key} must be a list of strings"
            )
        if key != "exclude":
            error = unknown_rule_ids(value, f"{path}: [tool.device-agnostic.scan] {key}")
            if error:
                raise ConfigError(error)
        setattr(config, key, list(value))
    if "torch-version" in table:
        try:
            config.torch_version = parse_version(table["torch-version"])
        except ValueError as exc:
            raise ConfigError(f"{path}: [tool.device-agnostic.scan] {exc}") from None
    sizes = {}
    for key, field_name in _LIMIT_KEYS.items():
        if key in table:
            try:
                sizes[field_name] = parse_size(table[key])
            except ValueError as exc:
                raise ConfigError(f"{path}: [tool.device-agnostic.scan] {key}: {exc}") from None
    config.limits = Limits(**{**dataclasses.asdict(config.limits), **sizes})
    unknown = set(table) - {"select", "ignore", "exclude", "torch-version", *_LIMIT_KEYS}
    if unknown:
        raise ConfigError(f"{path}: [tool.device-agnostic.scan] unknown keys: {sorted(unknown)}")
    return config
