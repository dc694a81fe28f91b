"""The pytest plugin's entry point (``pytest11``): the suite's options, and whether a pytest run
is a run of the suite.

Every pytest run in an environment that has the suite installed loads this module, so it imports
neither torch nor hypothesis nor any backend, and its options all start with ``--conformance-``
(a project's own ``--backend`` option does not clash). A run that asks for the suite
(``--pyargs conformance``, a path in the package, a folder holding it, or a ``--conformance-*``
option) starts :mod:`conformance.session`, which does the rest; any other run pays nothing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# name: (max_examples, per-test timeout in seconds); conformance.session applies them.
PROFILES = {
    "quick": (8, 120),
    "default": (40, 300),
    "thorough": (300, 1200),
}
# One default for both entry points: `conformance` and `pytest --pyargs conformance`.
DEFAULT_PROFILE = "quick"

# The options that say "run the suite" by being given (dest: default).
_SUITE_OPTIONS = (
    "conformance_backend",
    "conformance_manifest_dir",
    "conformance_json",
    "conformance_markdown",
    "conformance_label",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "device conformance suite")
    group.addoption(
        "--conformance-backend",
        default=None,
        help="backend to check: cpu, cuda, mps, xpu, neuron or any registered accelerator "
        "(default: the current accelerator, else cpu)",
    )
    group.addoption(
        "--conformance-reference", default="cpu", help="reference backend (default: cpu)"
    )
    group.addoption(
        "--conformance-profile",
        choices=sorted(PROFILES),
        default=DEFAULT_PROFILE,
        help=f"hypothesis example counts and timeouts (default: {DEFAULT_PROFILE}, for CI)",
    )
    group.addoption(
        "--conformance-manifest-dir",
        default=None,
        help="manifests in this directory add to the packaged ones, and override those of the "
        "same backend",
    )
    group.addoption(
        "--conformance-capabilities",
        choices=["declared", "probed"],
        default="declared",
        help="probed: run on capabilities probed now instead of a manifest (no known failures; "
        "the header and reports say 'probed, not declared')",
    )
    group.addoption("--conformance-json", default=None, help="write the results as JSON here")
    group.addoption(
        "--conformance-markdown", default=None, help="write the results as a Markdown matrix here"
    )
    group.addoption(
        "--conformance-label", default=None, help="column name in reports (default: the backend)"
    )
    group.addoption(
        "--conformance-strict-torch",
        action="store_true",
        default=False,
        help="a failure that torch's own CUDA assumptions cause (conformance/torch_faults.toml) "
        "fails the run too; by default it is reported as a torch fault, apart",
    )


_PACKAGE = Path(__file__).resolve().parent


def conformance_nodeid(item: pytest.Item) -> str | None:
    """The stable id of a conformance test ("conformance/test_rng.py::test_seed[x]"), or None
    for any other item.

    A test belongs to the suite if its module is a ``test_*.py`` of this package, wherever the
    package is installed. pytest's own node id cannot say so: it is relative to the rootdir,
    which need not be above the package (a run from a user's project gives "::test_seed"). The
    stable id is what reports and manifests' known failures (node id suffixes) use.
    """
    module = item.getparent(pytest.Module)
    if module is None:
        return None
    path = Path(module.path).resolve()
    if path.parent != _PACKAGE or not path.name.startswith("test_") or path.suffix != ".py":
        return None
    chain = item.listchain()
    inside = chain[chain.index(module) + 1 :]  # classes, then the test itself
    return "::".join([f"{_PACKAGE.name}/{path.name}", *(node.name for node in inside)])


def _is_conformance_item(item: pytest.Item) -> bool:
    return conformance_nodeid(item) is not None


def area_of(nodeid: str) -> str:
    """The semantic area of a test: its module's name without ``test_``."""
    return _module_file(nodeid).removesuffix(".py").removeprefix("test_")


def _module_file(nodeid: str) -> str:
    """The module file name of a node id or manifest entry ("test_rng.py")."""
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def check_report_path(option: str, value: str) -> None:
    """Raise pytest.UsageError unless a report can be written at ``value``: found out before
    the run, not after it, when the results would be lost. Leaves nothing behind."""
    path = Path(value).absolute()
    reason = None
    if path.is_dir():
        reason = "it is a directory"
    else:
        existing = path if path.exists() else path.parent
        while not existing.exists():
            existing = existing.parent
        if existing != path and not existing.is_dir():
            reason = f"{existing} is not a directory"
        else:
            try:  # try it: permission bits do not stop root, and some file systems refuse all
                if existing == path:  # without blocking, should it be a FIFO
                    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
                else:
                    descriptor, probe = tempfile.mkstemp(prefix=".conformance-", dir=existing)
                    os.close(descriptor)
                    os.unlink(probe)
            except OSError as error:
                what = "open it for writing" if existing == path else f"create a file in {existing}"
                reason = f"cannot {what}: {error.strerror or error}"
    if reason is not None:
        raise pytest.UsageError(
            f"{option}={value}: cannot write the report there ({reason}); "
            "pass a path in a writable directory."
        )


_ASKED_KEY = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "requires(capability): the test's expectation depends on a capability"
    )
    if not asks_for_the_suite(config):
        return
    config.stash[_ASKED_KEY] = True
    from . import session  # torch, hypothesis and the backend: only for a run of the suite

    session.start(config)


def asks_for_the_suite(config: pytest.Config) -> bool:
    """True if the command line names the suite: ``--pyargs conformance[.test_x]`` (what the
    ``conformance`` command runs), a path inside the package, a folder that holds it (and is not
    --ignore'd), or a --conformance-* option. pytest-xdist's controller collects nothing, so this
    is its only check."""
    if any(config.getoption(option) for option in _SUITE_OPTIONS):
        return True
    if config.getoption("conformance_capabilities") == "probed":
        return True
    ignored = [Path(p).resolve() for p in (config.getoption("ignore") or [])]
    if any(p == _PACKAGE or p in _PACKAGE.parents for p in ignored):
        return False
    for arg in config.args:
        target = arg.split("::", 1)[0]
        if config.option.pyargs and target.split(".", 1)[0] == _PACKAGE.name:
            return True
        path = Path(config.invocation_params.dir, target).resolve()
        if path == _PACKAGE or _PACKAGE in path.parents or path in _PACKAGE.parents:
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The suite's tests collected by a run that did not ask for the suite (a conftest's
    # collection, say): every one would need the backend fixture.
    if _ASKED_KEY not in config.stash and any(_is_conformance_item(i) for i in items):
        raise pytest.UsageError(
            "the conformance suite's tests were collected, but this run does not ask for the "
            "suite: run `pytest --pyargs conformance --conformance-backend NAME` (or the "
            "`conformance` command)."
        )
