"""The dependency rules of docs/architecture.md, read from the sources with ast.

Each product must stay installable and usable without the others (docs/architecture.md says why
for each rule), so what one product's modules may import is fixed. Every import statement counts,
also one inside a function or under ``if TYPE_CHECKING``: a lazy import is still a dependency of
the code path that runs it. Relative imports are resolved against the module's package. Code
that a product hands to another interpreter as a string (the patch queue's test runner imports
torch in the interpreter it starts) is not an import of that product.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (where, the top-level names or dotted prefixes its modules must never import, why)
RULES = [
    (
        "conformance",
        ("device_agnostic", "tools"),
        "the suite judges any backend and finds neuron through torch like any other accelerator",
    ),
    (
        "device_agnostic",
        ("conformance", "tools"),
        "the backend and the scanner ship without the suite and the maintainers' tools",
    ),
    (
        "device_agnostic/scan",
        ("torch", "device_agnostic.neuron", "numpy"),
        "da-scan installs and runs where torch is not installed",
    ),
    (
        "device_agnostic/neuron",
        ("device_agnostic.scan",),
        "the backend's distribution does not ship the scanner",
    ),
    (
        "tools/patchqueue",
        ("torch", "device_agnostic", "conformance", "numpy"),
        "da-patches applies, checks and exports without torch and without the backend",
    ),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import statement in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            # `from package import submodule` imports the submodule too.
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def violations(where: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for path in sorted((REPO / where).rglob("*.py")):
        for line, name in imported_names(path):
            for prefix in forbidden:
                if name == prefix or name.startswith(prefix + "."):
                    bad.append(f"{path.relative_to(REPO)}:{line}: imports {name}")
    return bad


@pytest.mark.parametrize(
    ("where", "forbidden", "why"), RULES, ids=[rule[0].replace("/", ".") for rule in RULES]
)
def test_product_imports_only_what_its_distribution_has(
    where: str, forbidden: tuple[str, ...], why: str
) -> None:
    assert (REPO / where).is_dir(), f"{where} is gone: update docs/architecture.md and RULES"
    bad = violations(where, forbidden)
    assert not bad, f"{where} must not import {', '.join(forbidden)} ({why}):\n" + "\n".join(bad)


def test_the_checker_sees_lazy_relative_and_from_imports(tmp_path: Path, monkeypatch) -> None:
    """The rules above cannot pass by not seeing an import."""
    package = tmp_path / "device_agnostic" / "scan"
    package.mkdir(parents=True)
    (tmp_path / "device_agnostic" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "lazy.py").write_text(
        "def f():\n    import torch.cuda\n"
        "from ..neuron import _C\n"
        "from device_agnostic import neuron\n"
    )
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    found = sorted(violations("device_agnostic/scan", ("torch", "device_agnostic.neuron")))
    assert found == [
        "device_agnostic/scan/lazy.py:2: imports torch.cuda",
        "device_agnostic/scan/lazy.py:3: imports device_agnostic.neuron",
        "device_agnostic/scan/lazy.py:3: imports device_agnostic.neuron._C",
        "device_agnostic/scan/lazy.py:4: imports device_agnostic.neuron",
    ], found


def test_distributions_do_not_ship_each_others_packages() -> None:
    """The backend's distribution finds device_agnostic but neither the scanner nor the suite,
    which da-scan and da-conformance ship (the same files in two distributions would overwrite
    each other, and two pytest11 entry points named conformance would load the plugin twice)."""
    import tomllib

    from setuptools import find_packages

    main = tomllib.loads((REPO / "pyproject.toml").read_text())
    find = main["tool"]["setuptools"]["packages"]["find"]
    shipped = find_packages(str(REPO), include=find["include"], exclude=find["exclude"])
    assert "device_agnostic.neuron" in shipped, shipped
    assert not [p for p in shipped if p.startswith(("device_agnostic.scan", "conformance"))]
    assert "pytest11" not in main["project"].get("entry-points", {})
    assert not set(main["project"].get("scripts", {})) & {"conformance", "da-scan", "da-patches"}
    dirs = {}
    for name in ("da-scan", "conformance", "patch-queue"):
        product = tomllib.loads((REPO / "packaging" / name / "pyproject.toml").read_text())
        assert product["project"]["version"] == main["project"]["version"], name
        for package, source in product["tool"]["setuptools"]["package-dir"].items():
            dirs[package] = (REPO / "packaging" / name / source).resolve()
    assert dirs == {
        "device_agnostic.scan": REPO / "device_agnostic" / "scan",
        "conformance": REPO / "conformance",
        "tools.patchqueue": REPO / "tools" / "patchqueue",
    }
