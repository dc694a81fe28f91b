"""The patch queue alone (packaging/patch-queue, distribution da-patches): a clean venv without
torch and without the neuron backend gets a working `da-patches` from one offline pip install.

Its dependencies (unidiff, ruff) are the environment's: links to the development venv's copies
with their metadata, on the clean venv's path through a .pth file, so pip sees them installed
and nothing downloads. The wheel and the editable install are made from copies in a temporary
directory, so nothing is written into the repository.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from test_scan_install import ok
from test_scan_install import run as run_in

REPO = Path(__file__).resolve().parents[1]
PACKAGING = REPO / "packaging" / "patch-queue"
QUEUE = REPO / "tools" / "patchqueue"
JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")


def run(cmd: list, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """test_scan_install's run, in clean_env() unless an environment is given."""
    return run_in(cmd, cwd, env if env is not None else clean_env())


def clean_env(path: Path | None = None) -> dict[str, str]:
    """No PYTHONPATH (the repository's copy must not leak in), no pip configuration or index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    if path is not None:
        env["PATH"] = f"{path}{os.pathsep}/usr/bin:/bin"
    return env


def source_copy(root: Path) -> Path:
    """packaging/patch-queue, tools/patchqueue and patches/ as a clone has them."""
    src = root / "src"
    shutil.copytree(PACKAGING, src / "packaging" / "patch-queue", ignore=JUNK)
    shutil.copytree(QUEUE, src / "tools" / "patchqueue", ignore=JUNK)
    shutil.copytree(REPO / "patches", src / "patches", ignore=JUNK)
    return src


def clean_venv(root: Path) -> Path:
    """A venv without torch, with the dev venv's unidiff and ruff linked in, and setuptools (the
    build backend, which pip's build isolation would otherwise fetch): its bin folder."""
    ok(run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], root))
    site = root / "deps"
    site.mkdir()
    for name in ("unidiff", "ruff", "setuptools"):
        dist = metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if ".." not in str(f)}:
            if (base / top).exists() and not (site / top).exists():
                (site / top).symlink_to(base / top)
    (purelib,) = (root / "venv" / "lib").glob("python3*/site-packages")
    (purelib / "deps.pth").write_text(f"{site}\n")
    return root / "venv" / "bin"


def pip_install(bin_dir: Path, *args: str | Path) -> None:
    pip = [sys.executable, "-m", "pip", "--python", bin_dir / "python", "install"]
    ok(run([*pip, "--no-build-isolation", *args], bin_dir.parent.parent))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("da-patches-build")
    src = source_copy(tmp)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    ok(run([*cmd, "-w", tmp / "dist", src / "packaging" / "patch-queue"], tmp))
    (built,) = (tmp / "dist").glob("*.whl")
    print(f"\nda-patches: wheel {built.stat().st_size / 1024:.0f} KiB")
    return built


def installed_torch() -> Path:
    import torch

    return Path(torch.__file__).parent


def test_wheel_is_pure_and_holds_every_queue_file_and_nothing_else(wheel: Path) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert wheel.name == f"da_patches-{version}-py3-none-any.whl", wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"da_patches-{version}.dist-info"
        meta = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    shipped = {n for n in names if ".dist-info/" not in n}
    on_disk = {
        p.relative_to(REPO).as_posix()
        for p in QUEUE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped == on_disk, (sorted(on_disk - shipped), sorted(shipped - on_disk))
    assert "tools/__init__.py" not in names
    requires = {re.split(r"[<>=!]", r)[0] for r in re.findall(r"^Requires-Dist: (.*)$", meta, re.M)}
    assert requires == {"unidiff", "ruff"}, requires
    assert "da-patches = tools.patchqueue.cli:main" in entry_points


def test_one_offline_install_checks_the_series_without_torch(wheel: Path, tmp_path: Path) -> None:
    bin_dir = clean_venv(tmp_path)
    pip_install(bin_dir, "--no-index", wheel)
    env = clean_env(bin_dir)
    probe = "import importlib.util as u; print(*map(u.find_spec, ('torch', 'device_agnostic')))"
    assert ok(run([bin_dir / "python", "-I", "-c", probe], tmp_path, env)).stdout == "None None\n"
    # A wheel installed away from a clone names the series it checks.
    checked = run(
        [bin_dir / "da-patches", "--series", REPO / "patches", "check", installed_torch()],
        tmp_path,
        env,
    )
    names = [n for n in (REPO / "patches" / "series").read_text().split() if n.endswith(".patch")]
    assert ok(checked).stdout.splitlines()[-1] == (
        f"{len(names)} patches: {len(names)} apply, 0 already applied, 0 conflict"
    )


def test_editable_install_from_a_clone_reads_its_series_from_anywhere(tmp_path: Path) -> None:
    """What the README says: `pip install -e ./packaging/patch-queue`, then da-patches from any
    folder uses the clone's patches/."""
    src = source_copy(tmp_path)
    bin_dir = clean_venv(tmp_path)
    pip_install(bin_dir, "--no-deps", "-e", src / "packaging" / "patch-queue")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = ok(
        run([bin_dir / "da-patches", "status", installed_torch()], elsewhere, clean_env(bin_dir))
    ).stdout
    assert "not applied" in status and "0000-" in status, status
