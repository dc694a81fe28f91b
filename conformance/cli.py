"""``conformance``: run the suite on a backend (a thin front for pytest)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from .plugin import DEFAULT_PROFILE


def init(argv: Sequence[str]) -> int:
    """``conformance init NAME``: probe the backend and write NAME.toml for review."""
    parser = argparse.ArgumentParser(
        prog="conformance init",
        description="Probe a backend (the capabilities area's probes) and write its manifest, "
        "every capability filled and commented with what the probe saw, for you to review. It "
        "writes no known failures.",
    )
    parser.add_argument("backend", help="the device type: the name torch knows it by")
    parser.add_argument(
        "-o", "--output", type=Path, help="where to write it (default: ./BACKEND.toml)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    args = parser.parse_args(argv)
    output = args.output or Path(f"{args.backend}.toml")
    if output.exists() and not args.force:
        parser.error(f"{output} exists; pass --force to overwrite it, or -o another path")
    from .backend import Backend, check_device_type
    from .manifest import Capabilities, Manifest
    from .probes import manifest_text, probe

    placeholder = Manifest(args.backend, "", Capabilities(frozenset(), frozenset()), ())
    try:
        check_device_type(args.backend)
        Backend(args.backend, placeholder).check_usable()
    except RuntimeError as error:
        parser.error(str(error))
    text = manifest_text(probe(args.backend))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    sys.stdout.write(
        f"wrote {output}: review each line, then run\n"
        f"  conformance --backend {args.backend} --manifest-dir {output.parent}\n"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["init"]:
        return init(argv[1:])
    parser = argparse.ArgumentParser(
        prog="conformance",
        description="Check a PyTorch backend against identical semantics. Extra arguments after "
        "'--' go to pytest. `conformance init NAME` writes a manifest for a new backend.",
    )
    parser.add_argument("--backend", help="cpu, cuda, mps, xpu, neuron, ... (default: current)")
    parser.add_argument("--reference", default="cpu")
    parser.add_argument(
        "--profile", default=DEFAULT_PROFILE, choices=["quick", "default", "thorough"]
    )
    parser.add_argument("--workers", default="2", help="pytest-xdist workers (crash isolation)")
    parser.add_argument("--json", help="write the results as JSON")
    parser.add_argument("--markdown", help="write the Markdown matrix")
    parser.add_argument("--label", help="column name in the report (default: the backend)")
    parser.add_argument(
        "--manifest-dir", help="manifests that add to (and override) the packaged ones"
    )
    parser.add_argument(
        "--capabilities",
        choices=["declared", "probed"],
        default="declared",
        help="probed: run on the probed capabilities, no manifest needed (labelled "
        "'probed, not declared')",
    )
    parser.add_argument(
        "--strict-torch",
        action="store_true",
        help="fail on torch's own faults too (conformance/torch_faults.toml); by default they "
        "are reported apart and leave the run green",
    )
    args, rest = parser.parse_known_args(argv)
    pytest_args = ["--pyargs", "conformance", "-p", "xdist", "-n", args.workers]
    pytest_args += ["--conformance-reference", args.reference]
    pytest_args += ["--conformance-profile", args.profile]
    for option, value in (
        ("--conformance-backend", args.backend),
        ("--conformance-json", args.json),
        ("--conformance-markdown", args.markdown),
        ("--conformance-label", args.label),
        ("--conformance-manifest-dir", args.manifest_dir),
        ("--conformance-capabilities", args.capabilities),
    ):
        if value:
            pytest_args += [option, value]
    if args.strict_torch:
        pytest_args.append("--conformance-strict-torch")
    pytest_args += [arg for arg in rest if arg != "--"]
    os.environ.setdefault("PYTHONHASHSEED", "0")
    return int(pytest.main(pytest_args))


if __name__ == "__main__":
    raise SystemExit(main())
