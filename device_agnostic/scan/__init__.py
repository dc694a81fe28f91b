"""Find CUDA assumptions in Python code (``da-scan``); pure standard library, no torch.

- :mod:`.rules`: one class per rule (id, summary, why, before/after, fix safety);
- :mod:`.engine`: parse one file with ``ast``, run the rules, honour ``# noqa``;
- :mod:`.discover`: files under the given paths, exclusions, loops and unreadable paths;
- :mod:`.config`: ``[tool.device-agnostic.scan]`` in pyproject.toml;
- :mod:`.parallel`: many files over every core;
- :mod:`.report`: text, JSON, SARIF 2.1.0 and GitHub annotations;
- :mod:`.cli`: the ``da-scan`` command.
"""

# The distribution's version (pyproject.toml and packaging/da-scan/pyproject.toml say the same;
# tests/test_scan_cli.py checks it).
__version__ = "0.1.0"

from .engine import scan_file, scan_source
from .rules import ALL_RULES, Finding

__all__ = ["ALL_RULES", "Finding", "scan_file", "scan_source"]
