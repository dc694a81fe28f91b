"""The two kinds of target: a PyTorch git checkout and an installed torch package.

A target is resolved once, by :func:`open_target`; every path the tools write is computed from
it, checked to stay inside it (:func:`refuse_links`), and never through a symbolic link.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tools.patchqueue.engine import Scope
from tools.patchqueue.errors import BadInput
from tools.patchqueue.series import Base

STATE_DIR_NAME = ".device_agnostic_patches"


@dataclass(frozen=True)
class GitCheckout:
    """A PyTorch git checkout (``.git`` and ``torch/__init__.py`` at ``root``)."""

    root: Path

    def read(self, path: str) -> bytes | None:
        """The work tree's bytes of ``path`` (from the repository root), None if absent."""
        try:
            return (self.root / path).read_bytes()
        except FileNotFoundError:
            return None

    def scope(self, path: str) -> Scope:
        """Every path of the series belongs to a checkout."""
        return "target"


@dataclass(frozen=True)
class InstalledTorch:
    """An installed torch package: ``torch_dir`` is the package folder (``.../torch``, or any
    other name a copy was given).

    Series paths ``torch/...`` map to ``torch_dir/...``; the ``test/`` files the series adds go
    to a separate tests folder; anything else is outside this target.
    """

    torch_dir: Path

    @property
    def site_packages(self) -> Path:
        """The folder that holds the torch package."""
        return self.torch_dir.parent

    @property
    def state_dir(self) -> Path:
        """Where the overlay keeps its journal, backups and record (next to the package; named
        after the package folder when that is not ``torch``, so two copies never share one)."""
        name = (
            STATE_DIR_NAME
            if self.torch_dir.name == "torch"
            else (f"{STATE_DIR_NAME}.{self.torch_dir.name}")
        )
        return self.site_packages / name

    def dest(self, path: str) -> Path:
        """Where the series path ``torch/...`` lives in this package."""
        if not path.startswith("torch/"):
            raise ValueError(f"{path}: not a torch/ path")
        return self.torch_dir / path[len("torch/") :]

    def read(self, path: str) -> bytes | None:
        """The installed bytes of ``path`` (``torch/...``), None if absent."""
        try:
            return self.dest(path).read_bytes()
        except FileNotFoundError:
            return None

    def scope(self, path: str) -> Scope:
        """``torch/`` paths are overlaid, ``test/`` paths go to the tests folder."""
        if path.startswith("torch/"):
            return "target"
        if path.startswith("test/"):
            return "tests"
        return "skip"

    def version(self) -> tuple[str, str | None]:
        """``__version__`` and ``git_version`` from ``torch/version.py``, read without importing."""
        version_file = self.torch_dir / "version.py"
        try:
            text = version_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"{version_file}: cannot read the torch version: {exc}") from exc
        version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        commit = re.search(r"^git_version\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if not version:
            raise BadInput(f"{version_file}: no __version__ found")
        return version.group(1), commit.group(1) if commit else None

    def check_base(self, base: Base, *, force: bool = False) -> None:
        """Raise BadInput unless this torch is the series' base (local version label ignored).

        A ``version.py`` without ``git_version`` cannot prove the commit: refused unless
        ``force``.
        """
        version, commit = self.version()
        public = version.split("+", 1)[0]
        if public != base.version or (commit is not None and commit != base.commit):
            raise BadInput(
                f"{self.torch_dir}: torch {version} (git {commit}) is not the series' base, "
                f"torch {base.version} (git {base.commit}); the overlay needs exactly that "
                "version (refresh the series for another one)"
            )
        if commit is None and not force:
            raise BadInput(
                f"{self.torch_dir / 'version.py'}: has no git_version, so the commit of this "
                f"torch {version} cannot be checked against the series' base {base.commit}; "
                "pass --force if you know it is that commit"
            )


Target = GitCheckout | InstalledTorch


def _is_torch_package(path: Path) -> bool:
    """``__init__.py``, ``_tensor.py`` and a ``version.py`` that sets ``__version__``: what every
    torch 2.x package has and other packages with a version.py (torchvision...) do not."""
    if not all((path / name).is_file() for name in ("__init__.py", "_tensor.py", "version.py")):
        return False
    try:
        text = (path / "version.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r"^__version__\s*=", text, re.M) is not None


def open_target(path: Path) -> Target:
    """Recognise a target: a checkout, a torch package folder (whatever its name), or a folder
    holding ``torch/``. The path is resolved here, once; every write stays inside it."""
    given = Path(path)
    path = given.resolve()
    if not path.is_dir():
        raise BadInput(f"{given}: not a directory")
    if (path / ".git").exists() and (path / "torch" / "__init__.py").is_file():
        return GitCheckout(path)
    if _is_torch_package(path):
        return InstalledTorch(path)
    if _is_torch_package(path / "torch"):
        return InstalledTorch(path / "torch")
    raise BadInput(
        f"{given}: neither a PyTorch git checkout (.git and torch/__init__.py) nor an installed "
        "torch package (__init__.py, _tensor.py and a version.py with __version__), nor a "
        "folder holding one as torch/"
    )


def refuse_links(root: Path, dest: Path) -> None:
    """Raise BadInput unless writing ``dest`` changes only ``root``'s own tree.

    ``dest`` itself must not be a symbolic link (even a dangling one: writing would create a
    file where it points, and revert could not give the link back); a folder on the way may be
    a link only when it resolves inside ``root``.
    """
    root_real = Path(os.path.realpath(root))
    relative = Path(os.path.relpath(dest, root))
    if relative.parts[:1] == ("..",):
        raise BadInput(f"{dest}: outside the target {root}; refusing to write it")
    if dest.is_symlink():
        raise BadInput(
            f"{dest}: is a symbolic link (to {os.readlink(dest)}); the patch tools never write "
            "through or replace links; make it a regular file first"
        )
    probe = root
    for part in relative.parts[:-1]:
        probe = probe / part
        if probe.is_symlink():
            real = Path(os.path.realpath(probe))
            if real != root_real and root_real not in real.parents:
                raise BadInput(
                    f"{probe}: is a symbolic link to {real}, outside the target {root}; "
                    f"writing {dest} would change files outside it; refusing"
                )
        if not probe.exists():
            break
