"""The two kinds of target: a PyTorch git checkout and an installed torch package."""

from __future__ import annotations

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
    """An installed torch package: ``torch_dir`` is ``.../site-packages/torch``.

    Series paths ``torch/...`` map to ``site_packages/torch/...``; the ``test/`` files the series
    adds go to a separate tests folder; anything else is outside this target.
    """

    torch_dir: Path

    @property
    def site_packages(self) -> Path:
        """The folder that holds the torch package."""
        return self.torch_dir.parent

    @property
    def state_dir(self) -> Path:
        """Where the overlay keeps its backups and its record (next to the package)."""
        return self.site_packages / STATE_DIR_NAME

    def read(self, path: str) -> bytes | None:
        """The installed bytes of ``path`` (``torch/...``), None if absent."""
        try:
            return (self.site_packages / path).read_bytes()
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

    def check_base(self, base: Base) -> None:
        """Raise BadInput unless this torch is the series' base (local version label ignored)."""
        version, commit = self.version()
        public = version.split("+", 1)[0]
        if public != base.version or (commit is not None and commit != base.commit):
            raise BadInput(
                f"{self.torch_dir}: torch {version} (git {commit}) is not the series' base, "
                f"torch {base.version} (git {base.commit}); the overlay needs exactly that "
                "version (refresh the series for another one)"
            )


Target = GitCheckout | InstalledTorch


def open_target(path: Path) -> Target:
    """Recognise a target: a checkout, a torch package dir, or a site-packages holding torch."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise BadInput(f"{path}: not a directory")
    if (path / ".git").exists() and (path / "torch" / "__init__.py").is_file():
        return GitCheckout(path)
    if (path / "__init__.py").is_file() and (path / "version.py").is_file():
        return InstalledTorch(path)
    if (path / "torch" / "__init__.py").is_file() and (path / "torch" / "version.py").is_file():
        return InstalledTorch(path / "torch")
    raise BadInput(
        f"{path}: neither a PyTorch git checkout (.git and torch/__init__.py) nor an installed "
        "torch package (torch/__init__.py and torch/version.py)"
    )
