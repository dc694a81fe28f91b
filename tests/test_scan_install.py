"""The scanner alone (packaging/da-scan): one `pip install` into a clean venv gives a working
da-scan, with no torch and no compiler; the documented pre-commit hooks run for real.

Nothing downloads: pip runs with --no-index and without the machine's pip configuration, on the
wheel built here and build/wheelhouse (libcst and pyyaml as pinned in requirements.txt, and
setuptools; scripts/bootstrap fills it). pre-commit comes from build/pre-commit-venv (bootstrap).
The wheel is built from a copy of packaging/da-scan and device_agnostic/scan in a temporary
directory, so the build writes nothing into the repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PACKAGING = REPO / "packaging" / "da-scan"
SCANNER = REPO / "device_agnostic" / "scan"
WHEELHOUSE = REPO / "build" / "wheelhouse"
PRE_COMMIT = REPO / "build" / "pre-commit-venv" / "bin" / "pre-commit"
WHEELHOUSE_PINS = ("libcst", "pyyaml", "setuptools")
INSTALL_LIMIT_S = 60.0  # loose; the measured figure is in README.md
# libcst's parser is Rust: a build of it from source would call cargo.
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "clang++", "cargo", "rustc")

CUDA_FIRST = """\
import torch

model = torch.nn.Linear(4, 4).cuda()
x = torch.randn(2, 4).cuda()
torch.cuda.synchronize()
"""
CLEAN = "def add(a, b):\n    return a + b\n"
REVIEW_ONLY = "def on_gpu(x):\n    return x.is_cuda\n"  # DA106: --fix leaves it (review)


def require(ready: bool, what: str) -> None:
    """Skip without the bootstrap's outputs; fail when scripts/test bootstrapped just before."""
    if ready:
        return
    message = f"{what} is missing; run scripts/bootstrap (it needs the package registry once)"
    if os.environ.get("DEVICE_AGNOSTIC_BOOTSTRAPPED"):
        pytest.fail(message)
    pytest.skip(message)


def pinned(name: str) -> str:
    for line in (REPO / "requirements.txt").read_text().splitlines():
        if line.lower().startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"requirements.txt pins no {name}")


def assert_made_device_generic(path: Path) -> None:
    """CUDA_FIRST rewritten by the safe fixes (the exact rewrite is test_scan_fix's business)."""
    text = path.read_text()
    compile(text, str(path), "exec")
    assert ".cuda()" not in text and "torch.cuda." not in text, text
    assert "torch.accelerator." in text, text


def main_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="session")
def tripwire(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of compilers that record their call and fail. A version query is not recorded:
    pip asks `rustc --version` for its user agent."""
    folder = tmp_path_factory.mktemp("tripwire")
    script = (
        f'#!/bin/sh\n[ "$*" = --version ] || echo "$0 $*" >> "{folder / "calls.log"}"\nexit 1\n'
    )
    for name in COMPILERS:
        (folder / name).write_text(script)
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture(autouse=True)
def no_compiler_called(tripwire: Path):
    yield
    calls = tripwire / "calls.log"
    assert not calls.exists(), f"a compiler was called:\n{calls.read_text()}"


@pytest.fixture(scope="session")
def offline_env(tripwire: Path) -> Callable[..., dict[str, str]]:
    """``offline_env(tmp, path, find_links)``: an environment in which pip cannot reach an index
    and reads no pip configuration, caches stay under ``tmp``, ``path`` comes first on PATH (no
    other venv's bin is on it) and every compiler is the tripwire's."""
    drop = ("PIP_", "PYTHON", "VIRTUAL_ENV", "PRE_COMMIT", "GIT_", "XDG_")
    inherited = [
        entry
        for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if entry and not (Path(entry).parent / "pyvenv.cfg").exists()
    ]

    def make(tmp: Path, path: Sequence[Path] = (), find_links: Sequence[Path] = ()):
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env.update(
            PATH=os.pathsep.join([*map(str, path), str(tripwire), *inherited]),
            HOME=str(tmp),
            PIP_CONFIG_FILE=os.devnull,
            PIP_NO_INDEX="1",
            PIP_FIND_LINKS=" ".join(map(str, find_links)),
            PIP_NO_CACHE_DIR="1",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            CC=str(tripwire / "cc"),
            CXX=str(tripwire / "c++"),
            PRE_COMMIT_HOME=str(tmp / "pre-commit-cache"),
            VIRTUALENV_NO_PERIODIC_UPDATE="1",
            GIT_CONFIG_NOSYSTEM="1",
        )
        return env

    return make


def run(cmd: list[str | Path], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def ok(result: subprocess.CompletedProcess, code: int = 0) -> subprocess.CompletedProcess:
    assert result.returncode == code, (
        f"{' '.join(result.args)}: exit {result.returncode}, expected {code}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    return result


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    wanted = {name: pinned(name) for name in WHEELHOUSE_PINS}
    missing = [
        f"{name}=={version}"
        for name, version in wanted.items()
        if not list(WHEELHOUSE.glob(f"{name}-{version}-*.whl"))
    ]
    require(not missing, f"build/wheelhouse ({', '.join(missing)})")
    return WHEELHOUSE


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory, offline_env) -> Path:
    """da-scan's wheel, built as the issue says: the dev venv's pip, no isolation, no deps."""
    tmp = tmp_path_factory.mktemp("da-scan-build")
    src = tmp / "src"
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
    shutil.copytree(PACKAGING, src / "packaging" / "da-scan", ignore=junk)
    shutil.copytree(SCANNER, src / "device_agnostic" / "scan", ignore=junk)
    out = tmp / "dist"
    env = offline_env(tmp, [Path(sys.executable).parent])
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    ok(run([*pip_wheel, "-w", out, src / "packaging" / "da-scan"], tmp, env))
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path, wheelhouse: Path, offline_env):
    """A clean venv (no system site-packages, not even pip) with da-scan installed by one
    offline pip install: (its bin folder, the install's wall time in seconds)."""
    tmp = tmp_path_factory.mktemp("da-scan-venv")
    ok(run([sys.executable, "-m", "venv", "--without-pip", tmp / "venv"], tmp, dict(os.environ)))
    bin_dir = tmp / "venv" / "bin"
    env = offline_env(tmp, [bin_dir], [wheel.parent, wheelhouse])
    # The dev venv's pip installs into it (--python): the same work as the venv's own pip, without
    # the seconds ensurepip takes to put one there.
    pip = [sys.executable, "-m", "pip", "--python", bin_dir / "python", "install"]
    start = time.monotonic()
    ok(run([*pip, "--only-binary=:all:", "da-scan"], tmp, env))
    seconds = time.monotonic() - start
    print(f"\nda-scan: wheel {wheel.stat().st_size / 1024:.0f} KiB; pip install {seconds:.1f} s")
    return bin_dir, seconds


def project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def git_repo(root: Path, env: dict[str, str], commit: bool = False) -> str:
    ok(run(["git", "init", "-q", "."], root, env))
    ok(run(["git", "add", "-A"], root, env))
    if not commit:
        return ""
    ident = ["-c", "user.name=da-scan test", "-c", "user.email=test@example.invalid"]
    ok(run(["git", *ident, "commit", "-qm", "hooks"], root, env))
    return ok(run(["git", "rev-parse", "HEAD"], root, env)).stdout.strip()


def shipped_hooks() -> dict[str, dict]:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    return {hook["id"]: hook for hook in hooks}


def documented_config() -> dict:
    """The `repo: local` .pre-commit-config.yaml of README.md's scanner section."""
    blocks = re.findall(r"```yaml\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    configs = [yaml.safe_load(b) for b in blocks if "repo: local" in b and "da-scan" in b]
    assert len(configs) == 1, "README.md must show one `repo: local` da-scan pre-commit config"
    return configs[0]


# --- The distribution ------------------------------------------------------------------------


def test_wheel_is_pure_and_holds_every_scanner_file_and_nothing_else(wheel: Path) -> None:
    assert wheel.name == f"da_scan-{main_version()}-py3-none-any.whl", wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"da_scan-{main_version()}.dist-info/METADATA").decode()
        entry_points = archive.read(f"da_scan-{main_version()}.dist-info/entry_points.txt")
    shipped = {n for n in names if ".dist-info/" not in n}
    on_disk = {
        p.relative_to(REPO).as_posix()
        for p in SCANNER.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert shipped == on_disk, (
        f"not in the wheel: {sorted(on_disk - shipped)}; only in the wheel: "
        f"{sorted(shipped - on_disk)} (packaging/da-scan/pyproject.toml)"
    )
    # No device_agnostic/__init__.py: where only da-scan is installed it is a namespace package.
    assert "device_agnostic/__init__.py" not in names
    requires = re.findall(r"^Requires-Dist: (.*)$", metadata, re.M)
    assert requires == ["libcst<2,>=1.9"], requires
    assert b"da-scan = device_agnostic.scan.cli:main" in entry_points


def test_version_is_the_main_distributions() -> None:
    ours = tomllib.loads((PACKAGING / "pyproject.toml").read_text())["project"]["version"]
    assert ours == main_version(), "packaging/da-scan/pyproject.toml: version differs from ../.."


def test_sdist_is_refused_before_it_writes_anything(tmp_path: Path, offline_env) -> None:
    src = tmp_path / "src"
    (src / "packaging" / "da-scan").mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(PACKAGING / name, src / "packaging" / "da-scan" / name)
    shutil.copytree(SCANNER, src / "device_agnostic" / "scan")
    before = sorted(p for p in src.rglob("*") if "egg-info" not in str(p))
    code = f"from setuptools import build_meta; build_meta.build_sdist({str(tmp_path / 'out')!r})"
    env = offline_env(tmp_path, [Path(sys.executable).parent])
    result = run([sys.executable, "-c", code], src / "packaging" / "da-scan", env)
    assert result.returncode != 0, result.stdout
    assert "no sdist" in result.stderr and "pip wheel packaging/da-scan" in result.stderr
    after = sorted(p for p in src.rglob("*") if "egg-info" not in str(p))
    assert after == before, f"the refused sdist wrote {sorted(set(after) - set(before))}"


# --- One offline pip install into a clean venv -----------------------------------------------


def test_one_offline_pip_install_needs_no_compiler_and_brings_no_torch(
    venv, tmp_path: Path, offline_env, tripwire: Path
) -> None:
    bin_dir, seconds = venv
    assert seconds < INSTALL_LIMIT_S, f"pip install da-scan took {seconds:.1f} s"
    env = offline_env(tmp_path, [bin_dir])
    # The install ran with this PATH: any compiler it looked for was the tripwire's, which
    # no_compiler_called checks was never called.
    assert shutil.which("gcc", path=env["PATH"]) == str(tripwire / "gcc")
    probe = """if True:
        import importlib.metadata as md, importlib.util as iu, json, sys
        import device_agnostic, device_agnostic.scan
        print(json.dumps({
            "dists": sorted(d.metadata["Name"].lower() for d in md.distributions()),
            "torch": iu.find_spec("torch") is not None,
            "namespace": getattr(device_agnostic, "__file__", None) is None,
            "neuron": iu.find_spec("device_agnostic.neuron") is not None,
            "scan": device_agnostic.scan.__file__,
            "prefix": sys.prefix,
        }))
    """
    # -I: neither the current folder nor PYTHON* variables can bring the repository's copy in.
    found = json.loads(ok(run([bin_dir / "python", "-I", "-c", probe], tmp_path, env)).stdout)
    assert not found["torch"], "torch is importable in the clean venv"
    assert not found["neuron"], "the neuron backend came with da-scan"
    assert found["namespace"], "device_agnostic is not a namespace package in da-scan's venv"
    assert found["scan"].startswith(found["prefix"]), found["scan"]
    # da-scan and what libcst needs, nothing else.
    assert found["dists"] == ["da-scan", "libcst", "pyyaml"], found["dists"]


def test_da_scan_on_a_file_list_exits_as_documented(venv, tmp_path: Path, offline_env) -> None:
    """What pre-commit runs: `da-scan FILE...` (0 clean, 1 findings), `da-scan --fix FILE...`
    (0 when nothing is left, 1 when findings remain; the file rewritten in place)."""
    bin_dir, _ = venv
    env = offline_env(tmp_path, [bin_dir])
    files = {"train.py": CUDA_FIRST, "clean.py": CLEAN, "util.py": CLEAN, "gpu.py": REVIEW_ONLY}
    root = project(tmp_path / "proj", files)

    assert "All checks passed." in ok(run(["da-scan", "clean.py", "util.py"], root, env)).stdout
    report = ok(run(["da-scan", "train.py", "clean.py"], root, env), 1).stdout
    assert "train.py" in report and "DA101" in report and "DA102" in report, report

    fixed = ok(run(["da-scan", "--fix", "train.py", "clean.py"], root, env)).stdout
    assert re.search(r"Fixed 3 findings in 1 file \(0 remaining", fixed), fixed
    assert_made_device_generic(root / "train.py")
    assert (root / "clean.py").read_text() == CLEAN
    ok(run(["da-scan", "train.py"], root, env))

    remaining = ok(run(["da-scan", "--fix", "gpu.py", "train.py"], root, env), 1).stdout
    assert "DA106" in remaining and "(1 remaining" in remaining, remaining
    assert (root / "gpu.py").read_text() == REVIEW_ONLY


# --- pre-commit, for real ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def pre_commit() -> Path:
    require(PRE_COMMIT.exists(), "build/pre-commit-venv")
    require(shutil.which("git") is not None, "git (pre-commit needs it)")
    return PRE_COMMIT


def test_documented_local_hook_installs_da_scan_offline_and_reports(
    pre_commit: Path, wheel: Path, wheelhouse: Path, tmp_path: Path, offline_env
) -> None:
    config = documented_config()
    (local,) = config["repos"]
    for hook in local["hooks"]:
        (dependency,) = hook["additional_dependencies"]
        assert re.fullmatch(r"da-scan @ git\+\S+#subdirectory=packaging/da-scan", dependency)
        # The hook as .pre-commit-hooks.yaml defines it, but installed by pre-commit (python).
        shipped = shipped_hooks()[hook["id"]]
        for key in ("entry", "types", "require_serial"):
            assert hook.get(key) == shipped.get(key), (hook["id"], key)
        assert hook["language"] == "python"
        # The same distribution, from the wheel built here instead of the repository's URL.
        hook["additional_dependencies"] = [f"da-scan=={main_version()}"]
    files = {"train.py": CUDA_FIRST, "clean.py": CLEAN}
    root = project(tmp_path / "proj", files)
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    env = offline_env(tmp_path, [], [wheel.parent, wheelhouse])
    git_repo(root, env)

    start = time.monotonic()
    failed = ok(run([pre_commit, "run", "--all-files"], root, env), 1)
    print(f"\npre-commit: hook environment installed and run in {time.monotonic() - start:.1f} s")
    assert "Installing environment for local" in failed.stdout + failed.stderr
    assert "da-scan" in failed.stdout and "DA102" in failed.stdout, failed.stdout
    passed = ok(run([pre_commit, "run", "--files", "clean.py"], root, env)).stdout
    assert re.search(r"da-scan\.+Passed", passed), passed


def test_shipped_hooks_fix_then_pass_with_da_scan_on_path(
    pre_commit: Path, venv, tmp_path: Path, offline_env
) -> None:
    bin_dir, _ = venv
    env = offline_env(tmp_path, [bin_dir])
    assert shutil.which("da-scan", path=env["PATH"]) == str(bin_dir / "da-scan")
    hooks = project(tmp_path / "hooks", {})
    shutil.copy2(REPO / ".pre-commit-hooks.yaml", hooks)
    rev = git_repo(hooks, env, commit=True)
    config = {
        "repos": [
            {"repo": str(hooks), "rev": rev, "hooks": [{"id": "da-scan-fix"}, {"id": "da-scan"}]}
        ]
    }
    root = project(tmp_path / "proj", {"train.py": CUDA_FIRST, "clean.py": CLEAN})
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git_repo(root, env)

    first = ok(run([pre_commit, "run", "--all-files"], root, env), 1).stdout
    assert re.search(r"da-scan --fix\.+Failed", first), first
    assert "files were modified by this hook" in first, first
    assert_made_device_generic(root / "train.py")
    second = ok(run([pre_commit, "run", "--all-files"], root, env)).stdout
    assert re.search(r"da-scan --fix\.+Passed", second), second
    assert re.search(r"da-scan\.+Passed", second), second
