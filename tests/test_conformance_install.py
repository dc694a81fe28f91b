"""The suite alone (packaging/conformance): one offline `pip install` of its pure-Python wheel into
a clean venv that has torch and a vendor's backend gives a working `conformance`, with no compiler
and without this project's package; then a vendor's path from an unrelated folder, on a backend
the installed suite has no manifest for.

The venv is created without system site-packages. torch (and what it needs) and the vendor's
backend are the environment a vendor already has: a folder of links to the development venv's
copies, on the venv's path through a .pth file, with their own metadata, so pip sees torch as
installed. The backend is this project's neuron (the only out-of-tree PrivateUse1 backend on this
machine) under a vendor distribution of its own ("neuron-vendor": only its torch.backends entry
point), and the installed suite's neuron.toml is deleted: the suite has never heard of it.

Nothing downloads: pip runs with --no-index on the wheel built here and build/wheelhouse (pytest,
pytest-xdist, pytest-timeout, hypothesis, expecttest and their dependencies; scripts/bootstrap
fills it). The wheel is built from a copy in a temporary directory.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
import shutil
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_scan_install import (  # noqa: F401 - fixtures: tripwire, offline_env, no_compiler_called
    no_compiler_called,
    offline_env,
    ok,
    pinned,
    require,
    run,
    tripwire,
)

REPO = Path(__file__).resolve().parents[1]
PACKAGING = REPO / "packaging" / "conformance"
SUITE = REPO / "conformance"
WHEELHOUSE = REPO / "build" / "wheelhouse"
WHEELHOUSE_PINS = (
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "hypothesis",
    "expecttest",
    "numpy",
)
INSTALL_LIMIT_S = 60.0  # loose; the test prints the measured figure
# The vendor's folder: its own files only, nothing copied from the suite.
VENDOR_AREAS = "test_capabilities or test_creation"


def main_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    missing = [
        f"{name}=={pinned(name)}"
        for name in WHEELHOUSE_PINS
        if not list(WHEELHOUSE.glob(f"{name.replace('-', '_')}-{pinned(name)}-*.whl"))
    ]
    require(not missing, f"build/wheelhouse ({', '.join(missing)})")
    return WHEELHOUSE


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory, offline_env) -> Path:  # noqa: F811
    """The suite's wheel: the dev venv's pip, no isolation, no deps, from a copy."""
    tmp = tmp_path_factory.mktemp("conformance-build")
    src = tmp / "src"
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
    shutil.copytree(PACKAGING, src / "packaging" / "conformance", ignore=junk)
    shutil.copytree(SUITE, src / "conformance", ignore=junk)
    out = tmp / "dist"
    env = offline_env(tmp, [Path(sys.executable).parent])
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    ok(run([*pip_wheel, "-w", out, src / "packaging" / "conformance"], tmp, env))
    (built,) = out.glob("*.whl")
    return built


def _closure(name: str) -> list[metadata.Distribution]:
    """``name``'s distribution and everything it requires (markers evaluated, no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = canonicalize_name(todo.pop())
        if key in seen:
            continue
        seen[key] = metadata.distribution(key)
        for line in seen[key].requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


def vendor_site(root: Path) -> Path:
    """torch and what torch requires (links to the dev venv's), and the vendor's backend: the
    environment a vendor has. Not numpy, which torch does not require: the suite must bring it
    (torch.testing._internal imports it), from its own declared dependencies."""
    site = root / "vendor-site"
    site.mkdir()
    for dist in _closure("torch"):
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        base = Path(str(dist.locate_file("")))
        for top in tops:
            if (base / top).exists() and not (site / top).exists():
                (site / top).symlink_to(base / top)
    (site / "device_agnostic").symlink_to(REPO / "device_agnostic", target_is_directory=True)
    info = site / "neuron_vendor-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: neuron-vendor\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[torch.backends]\nneuron = device_agnostic.neuron:_autoload\n"
    )
    return site


@pytest.fixture(scope="session")
def venv(tmp_path_factory, wheel: Path, wheelhouse: Path, offline_env):  # noqa: F811
    """A clean venv with torch and the vendor's backend, and da-conformance installed by one
    offline pip install: (its bin folder, the install's wall time in seconds)."""
    tmp = tmp_path_factory.mktemp("conformance-venv")
    ok(
        run(
            [sys.executable, "-m", "venv", "--without-pip", tmp / "venv"], tmp, {"PATH": "/usr/bin"}
        )
    )
    bin_dir = tmp / "venv" / "bin"
    (purelib,) = (tmp / "venv" / "lib").glob("python3*/site-packages")
    (purelib / "vendor-environment.pth").write_text(f"{vendor_site(tmp)}\n")
    env = offline_env(tmp, [bin_dir], [wheel.parent, wheelhouse])
    pip = [sys.executable, "-m", "pip", "--python", bin_dir / "python", "install"]
    start = time.monotonic()
    ok(run([*pip, "--only-binary=:all:", "da-conformance"], tmp, env))
    seconds = time.monotonic() - start
    size = wheel.stat().st_size / 1024
    print(f"\nda-conformance: wheel {size:.0f} KiB; pip install {seconds:.1f} s")
    # The installed suite has never heard of neuron.
    (purelib / "conformance" / "backends" / "neuron.toml").unlink()
    return bin_dir, seconds


# --- The distribution ------------------------------------------------------------------------


def test_wheel_is_pure_and_holds_every_suite_file_and_nothing_else(wheel: Path) -> None:
    assert wheel.name == f"da_conformance-{main_version()}-py3-none-any.whl", wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"da_conformance-{main_version()}.dist-info"
        meta = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    shipped = {n for n in names if ".dist-info/" not in n}
    on_disk = {
        p.relative_to(REPO).as_posix()
        for p in SUITE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped == on_disk, (
        f"not in the wheel: {sorted(on_disk - shipped)}; only in the wheel: "
        f"{sorted(shipped - on_disk)} (packaging/conformance/pyproject.toml)"
    )
    assert not any(n.endswith((".so", ".cpp", ".h")) for n in names)
    requires = sorted(re.findall(r"^Requires-Dist: (.*)$", meta, re.M))
    main = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    # The main distribution's dependencies, less da-scan's libcst.
    expected = sorted(str(Requirement(r)) for r in main if not r.startswith("libcst"))
    assert requires == expected, requires
    assert "conformance = conformance.plugin" in entry_points
    assert "conformance = conformance.cli:main" in entry_points
    assert "conformance-report = conformance.report:main" in entry_points


def test_version_is_the_main_distributions() -> None:
    ours = tomllib.loads((PACKAGING / "pyproject.toml").read_text())["project"]["version"]
    assert ours == main_version(), (
        "packaging/conformance/pyproject.toml: version differs from ../.."
    )


def test_sdist_is_refused(tmp_path: Path, offline_env) -> None:  # noqa: F811
    src = tmp_path / "src"
    shutil.copytree(PACKAGING, src / "packaging" / "conformance")
    shutil.copytree(SUITE, src / "conformance", ignore=shutil.ignore_patterns("__pycache__"))
    code = f"from setuptools import build_meta; build_meta.build_sdist({str(tmp_path / 'out')!r})"
    env = offline_env(tmp_path, [Path(sys.executable).parent])
    result = run([sys.executable, "-c", code], src / "packaging" / "conformance", env)
    assert result.returncode != 0, result.stdout
    assert "no sdist" in result.stderr and "pip wheel packaging/conformance" in result.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


# --- One offline pip install, then a vendor's path ------------------------------------------


def test_one_offline_pip_install_is_pure_python_and_brings_only_the_suite(
    venv,
    tmp_path: Path,
    offline_env,  # noqa: F811
) -> None:
    bin_dir, seconds = venv
    assert seconds < INSTALL_LIMIT_S, f"pip install da-conformance took {seconds:.1f} s"
    env = offline_env(tmp_path, [bin_dir])
    probe = """if True:
        import importlib.metadata as md, json, sys
        import conformance
        installed = [d for d in md.distributions() if d.locate_file("").as_posix().startswith(
            sys.prefix)]
        print(json.dumps({
            "installed": sorted(d.metadata["Name"].lower() for d in installed),
            "suite": conformance.__file__,
            "prefix": sys.prefix,
        }))
    """
    found = json.loads(ok(run([bin_dir / "python", "-I", "-c", probe], tmp_path, env)).stdout)
    assert found["suite"].startswith(found["prefix"]), found["suite"]
    # Installed into the venv: the suite and its test dependencies; torch was already there.
    assert "da-conformance" in found["installed"]
    assert "torch" not in found["installed"] and "device-agnostic" not in found["installed"]
    needed = {"pytest", "pytest-xdist", "pytest-timeout", "hypothesis", "expecttest", "numpy"}
    assert needed <= set(found["installed"]), found["installed"]


@pytest.mark.slow
def test_a_vendor_goes_from_no_manifest_to_a_green_report_in_an_unrelated_folder(
    venv,
    tmp_path: Path,
    offline_env,  # noqa: F811
) -> None:
    bin_dir, _ = venv
    env = offline_env(tmp_path, [bin_dir])
    project = tmp_path / "my-backend-ci"
    project.mkdir()

    # No manifest: the same usage error with --backend and without (the current accelerator).
    for args in (["conformance", "--backend", "neuron"], ["conformance"]):
        refused = ok(run(args, project, env), 4)
        assert "No manifest for backend 'neuron'" in refused.stderr, refused.stderr
        assert "conformance init neuron" in refused.stderr

    # A first look without writing anything: probed, and labelled so.
    probed = ok(run(["conformance", "--capabilities", "probed", "--workers", "0", "--json",
                     "probed.json", "--", "-k", "test_capabilities"], project, env))  # fmt: skip
    assert "PROBED, NOT DECLARED" in probed.stdout
    assert json.loads((project / "probed.json").read_text())["capabilities"] == "probed"

    # conformance init writes the one file the vendor keeps; then a run with it.
    ok(run(["conformance", "init", "neuron", "-o", "manifests/neuron.toml"], project, env))
    assert sorted(p.name for p in (project / "manifests").iterdir()) == ["neuron.toml"]
    command = ["conformance", "--backend", "neuron", "--manifest-dir", "manifests"]
    command += ["--workers", "2", "--json", "run.json", "--markdown", "run.md"]
    start = time.monotonic()
    green = run([*command, "--", "-k", VENDOR_AREAS], project, env)
    print(f"\nvendor run ({VENDOR_AREAS}): {time.monotonic() - start:.1f} s")
    assert green.returncode == 0, green.stdout[-4000:] + green.stderr[-2000:]
    record = json.loads((project / "run.json").read_text())
    assert record["capabilities"] == "declared"
    assert {r["area"] for r in record["results"]} == {"capabilities", "creation"}
    assert {r["outcome"] for r in record["results"]} <= {"passed", "not applicable"}
    assert "manifests/neuron.toml" in green.stdout
    markdown = (project / "run.md").read_text()
    assert "| capabilities | ok: " in markdown and "Failures of" not in markdown
