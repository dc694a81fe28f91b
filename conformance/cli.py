"""``conformance``: run the suite on a backend (a thin front for pytest)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import pytest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="conformance",
        description="Check a PyTorch backend against identical semantics. Extra arguments after "
        "'--' go to pytest.",
    )
    parser.add_argument("--backend", help="cpu, cuda, mps, xpu, neuron, ... (default: current)")
    parser.add_argument("--reference", default="cpu")
    parser.add_argument("--profile", default="quick", choices=["quick", "default", "thorough"])
    parser.add_argument("--workers", default="2", help="pytest-xdist workers (crash isolation)")
    parser.add_argument("--json", help="write the results as JSON")
    parser.add_argument("--markdown", help="write the Markdown matrix")
    parser.add_argument("--label", help="column name in the report (default: the backend)")
    args, rest = parser.parse_known_args(argv)
    pytest_args = ["--pyargs", "conformance", "-p", "xdist", "-n", args.workers]
    pytest_args += ["--reference", args.reference, "--conformance-profile", args.profile]
    for option, value in (
        ("--backend", args.backend),
        ("--conformance-json", args.json),
        ("--conformance-markdown", args.markdown),
        ("--conformance-label", args.label),
    ):
        if value:
            pytest_args += [option, value]
    pytest_args += [arg for arg in rest if arg != "--"]
    os.environ.setdefault("PYTHONHASHSEED", "0")
    return int(pytest.main(pytest_args))


if __name__ == "__main__":
    raise SystemExit(main())
