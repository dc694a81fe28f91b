"""Backend manifests: what a backend declares it can do, and the failures it knows about.

A manifest is ``backends/<name>.toml``::

    [capabilities]
    dtypes = ["float32", "bfloat16", ...]     # dtypes the device computes in
    multiple_devices = true                  # more than one device can be tested
    streams = true                           # torch.Stream / torch.Event work
    event_timing = true                      # Event(enable_timing=True).elapsed_time works
    memory_stats = true                      # torch.accelerator.memory_* report real numbers
    memory_capacity = true                   # allocating past the capacity raises OutOfMemoryError
    pinned_memory = true                     # pin_memory() / is_pinned() for this accelerator
    autocast_dtypes = ["bfloat16"]           # dtypes torch.autocast(device) accepts
    per_device_rng = true                    # each device has its own default generator
    serialization = true                     # torch.save / torch.load keep the device
    # optional: the ops autocast runs in the lower-precision dtype, and those it runs in float32
    # (names of test_autocast.py's tables); absent means CUDA's lists, which most backends reuse
    autocast_lower_precision_ops = ["mm", "matmul", ...]
    autocast_float32_ops = ["softmax", "exp", ...]
    compile = true                           # torch.compile's default backend runs on it
    distributed = true                       # a torch.distributed process group for it
    profiler = true                          # the profilers record device events and time

    [[known_failures]]
    test = "test_views.py::test_as_strided_shares_storage"   # a node id suffix
    reason = "why it fails"
    link = "https://github.com/pytorch/pytorch/issues/..."   # where it is tracked
    fixed_by = ["0001-....patch"]   # optional: the series patches that fix it (see patched.py)

A capability that is absent is an expectation, not a skip: the tests then expect a clear error.
The exceptions are the whole-feature areas (compile, distributed, profiler): a backend without
the feature has no defined behaviour to test, so their tests are "not applicable".
Known failures belong to one backend: a manifest never inherits another's (not even the one it
was copied from), and ``conformance init`` writes none.
"""

from __future__ import annotations

import dataclasses
import tomllib
from importlib import resources
from pathlib import Path

import torch

CAPABILITY_FLAGS = (
    "multiple_devices",
    "streams",
    "event_timing",
    "memory_stats",
    "memory_capacity",
    "pinned_memory",
    "per_device_rng",
    "serialization",
    "compile",
    "distributed",
    "profiler",
)


# Autocast op lists a manifest may declare (their names: the tables of test_autocast.py).
OP_LISTS = ("autocast_lower_precision_ops", "autocast_float32_ops")


class ManifestError(ValueError):
    """A manifest that cannot be read or says something that cannot be true."""


@dataclasses.dataclass(frozen=True)
class KnownFailure:
    """A test expected to fail on this backend, with why and where it is tracked."""

    test: str
    reason: str
    link: str
    fixed_by: tuple[str, ...] = ()  # the series patches that make it pass

    def fixed_in(self, applied: tuple[str, ...]) -> bool:
        """True if every patch that fixes this failure is among ``applied``."""
        return bool(self.fixed_by) and set(self.fixed_by) <= set(applied)

    def matches(self, nodeid: str) -> bool:
        """True if ``nodeid`` is this entry's test (the entry is a node id suffix)."""
        return (
            nodeid == self.test
            or nodeid.endswith("/" + self.test)
            or (nodeid.endswith(self.test) and nodeid[: -len(self.test)].endswith(("/", "::")))
        )


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend declares; see the module docstring for each field."""

    dtypes: frozenset[torch.dtype]
    autocast_dtypes: frozenset[torch.dtype]
    multiple_devices: bool = False
    streams: bool = False
    event_timing: bool = False
    memory_stats: bool = False
    memory_capacity: bool = False
    pinned_memory: bool = False
    per_device_rng: bool = False
    serialization: bool = True
    # None: CUDA's op lists (test_autocast.py's tables), which PrivateUse1 backends reuse.
    autocast_lower_precision_ops: frozenset[str] | None = None
    autocast_float32_ops: frozenset[str] | None = None
    compile: bool = False
    distributed: bool = False
    profiler: bool = False

    def supports(self, dtype: torch.dtype) -> bool:
        return dtype in self.dtypes


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A backend's capabilities and known failures, as read from its TOML file."""

    backend: str
    source: str
    capabilities: Capabilities
    known_failures: tuple[KnownFailure, ...]
    # True for capabilities probed at run time (``--capabilities=probed``): nobody declared them,
    # and reports say so.
    probed: bool = False

    def known_failure(self, nodeid: str) -> KnownFailure | None:
        return next((entry for entry in self.known_failures if entry.matches(nodeid)), None)


def _dtype(name: str, source: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ManifestError(f"{source}: {name!r} is not a torch dtype (e.g. 'float32').")
    return dtype


def parse(text: str, backend: str, source: str) -> Manifest:
    """Parse a manifest; raises ManifestError naming the file and the problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ManifestError(f"{source}: not valid TOML: {error}") from error
    unknown_tables = set(data) - {"capabilities", "known_failures"}
    if unknown_tables:
        raise ManifestError(f"{source}: unknown section(s) {sorted(unknown_tables)}.")
    if not isinstance(data.get("capabilities", {}), dict):
        raise ManifestError(f"{source}: capabilities must be a table ([capabilities]).")
    if not isinstance(data.get("known_failures", []), list):
        raise ManifestError(f"{source}: known_failures must be tables ([[known_failures]]).")
    raw = dict(data.get("capabilities", {}))
    unknown = set(raw) - set(CAPABILITY_FLAGS) - {"dtypes", "autocast_dtypes", *OP_LISTS}
    if unknown:
        raise ManifestError(
            f"{source}: unknown capability {sorted(unknown)}; known: "
            f"dtypes, autocast_dtypes, {', '.join((*CAPABILITY_FLAGS, *OP_LISTS))}."
        )
    op_lists = {}
    for field in OP_LISTS:
        if field not in raw:
            continue
        names = raw.pop(field)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ManifestError(
                f"{source}: capability {field!r} must be a list of op names "
                '(e.g. ["mm", "linear"]), or absent for CUDA\'s list.'
            )
        op_lists[field] = frozenset(names)
    for flag in CAPABILITY_FLAGS:
        if flag in raw and not isinstance(raw[flag], bool):
            raise ManifestError(f"{source}: capability {flag!r} must be true or false.")
    if "dtypes" not in raw:
        raise ManifestError(f"{source}: [capabilities] must list dtypes.")
    for field in ("dtypes", "autocast_dtypes"):
        names = raw.get(field, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ManifestError(
                f"{source}: capability {field!r} must be a list of dtype names "
                f'(e.g. ["float32", "bfloat16"]), not {names!r}.'
            )
    capabilities = Capabilities(
        dtypes=frozenset(_dtype(name, source) for name in raw.pop("dtypes")),
        autocast_dtypes=frozenset(_dtype(name, source) for name in raw.pop("autocast_dtypes", [])),
        **op_lists,
        **raw,
    )
    known = []
    for index, entry in enumerate(data.get("known_failures", [])):
        if not isinstance(entry, dict):
            raise ManifestError(f"{source}: known_failures[{index}] must be a table.")
        missing = {"test", "reason", "link"} - set(entry)
        if missing:
            raise ManifestError(
                f"{source}: known_failures[{index}] lacks {sorted(missing)}: every known failure "
                "needs the test, a reason and a link to where it is tracked."
            )
        fixed_by = entry.get("fixed_by", [])
        if isinstance(fixed_by, str):
            fixed_by = [fixed_by]
        if not isinstance(fixed_by, list) or not all(
            isinstance(name, str) and name.endswith(".patch") for name in fixed_by
        ):
            raise ManifestError(
                f"{source}: known_failures[{index}].fixed_by must name patch files of the series "
                f'(e.g. "0001-amp-gradscaler-default-device.patch"), not {fixed_by!r}.'
            )
        unknown_keys = set(entry) - {"test", "reason", "link", "fixed_by"}
        if unknown_keys:
            raise ManifestError(
                f"{source}: known_failures[{index}] has unknown field(s) {sorted(unknown_keys)}; "
                "known: test, reason, link, fixed_by."
            )
        for field in ("test", "reason", "link"):
            if not isinstance(entry[field], str) or not entry[field].strip():
                raise ManifestError(
                    f"{source}: known_failures[{index}] ({entry.get('test')!r}): {field} must be "
                    f"a non-empty string, not {entry[field]!r}."
                )
        known.append(
            KnownFailure(
                test=entry["test"],
                reason=entry["reason"],
                link=entry["link"],
                fixed_by=tuple(fixed_by),
            )
        )
    return Manifest(backend, source, capabilities, tuple(known))


def load(backend: str, directory: Path | None = None) -> Manifest:
    """Load the manifest of ``backend``: ``directory/<backend>.toml`` if there is one (a vendor's
    own, or one that overrides the packaged manifest), else the packaged
    ``conformance/backends/<backend>.toml``.

    Raises ManifestError if there is none: a backend without a manifest has declared nothing,
    and the suite will not guess (``conformance init NAME`` probes it and writes one).
    """
    if directory is not None:
        if not directory.is_dir():
            raise ManifestError(f"--manifest-dir {directory}: not a directory.")
        path = directory / f"{backend}.toml"
        if path.is_file():
            return parse(_read_text(path), backend, str(path))
    file = resources.files("conformance") / "backends" / f"{backend}.toml"
    if not file.is_file():
        looked = f"{directory}/ nor in " if directory is not None else ""
        raise ManifestError(
            f"No manifest for backend {backend!r} in {looked}conformance/backends/. Run "
            f"`conformance init {backend}` to probe the backend and write {backend}.toml for "
            "you to review, then pass --manifest-dir with its folder (or run once with "
            "--capabilities=probed)."
        )
    return parse(file.read_text(encoding="utf-8"), backend, f"conformance/backends/{backend}.toml")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ManifestError(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); TOML files are "
            "UTF-8: save it as UTF-8."
        ) from error
    except OSError as error:
        raise ManifestError(f"{path}: cannot read it: {error.strerror or error}") from error


def missing(backend: str, directory: Path | None = None) -> bool:
    """True if neither ``directory`` nor the package has a manifest for ``backend``."""
    if directory is not None and (directory / f"{backend}.toml").is_file():
        return False
    return not (resources.files("conformance") / "backends" / f"{backend}.toml").is_file()
