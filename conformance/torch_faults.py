"""Torch's own faults: the registry (``torch_faults.toml``) of the CUDA assumptions in torch that
the suite's tests reach, and how a failure is matched to one.

A backend cannot fix these, and a vendor must not list them as its own known failures: a failure
that matches an entry is reported as "torch fault" (with the series patch that fixes it), counted
apart in every report, and does not make the run red unless the run is strict about torch
(``--conformance-strict-torch``). One registry serves every backend; it is not a manifest.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from functools import cache
from importlib import resources

from .manifest import KnownFailure

SOURCE = "conformance/torch_faults.toml"
_FIELDS = {"test", "file", "line", "upstream", "patch", "reason", "error"}
_REQUIRED = {"test", "file", "line", "upstream", "reason"}


class RegistryError(ValueError):
    """The registry says something that cannot be used (a bug of the suite, not of a run)."""


@dataclasses.dataclass(frozen=True)
class TorchFault:
    """One CUDA assumption in torch that a test of the suite reaches."""

    test: str  # a node id suffix, as a manifest's known failure
    file: str  # torch's file at fault (torch 2.13.0)
    line: int
    upstream: str  # the upstream issue or pull request, else the code
    reason: str
    patch: str = ""  # the series patch that fixes it ("" if none yet)
    error: str = ""  # a regular expression the failure must contain ("" for any failure)

    def matches(self, nodeid: str, failure: str) -> bool:
        """True if ``nodeid`` is this entry's test and ``failure`` says what this fault says."""
        if not KnownFailure(self.test, "", "").matches(nodeid):
            return False
        return not self.error or re.search(self.error, failure) is not None

    def label(self) -> str:
        """'torch's fault (patch 0004-x.patch fixes it)', as every report says it."""
        fix = f"patch {self.patch} fixes it" if self.patch else "no patch in the series yet"
        return f"torch's fault ({fix})"

    def describe(self) -> str:
        """The label, the reason, where in torch, and the upstream link: one line."""
        return f"{self.label()}: {self.reason} [{self.file}:{self.line}; {self.upstream}]"


def parse(text: str, source: str = SOURCE) -> tuple[TorchFault, ...]:
    """The registry's entries; RegistryError names the entry and the problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RegistryError(f"{source}: not valid TOML: {error}") from error
    if set(data) - {"faults"}:
        raise RegistryError(f"{source}: unknown section(s) {sorted(set(data) - {'faults'})}.")
    faults = []
    for index, entry in enumerate(data.get("faults", [])):
        where = f"{source}: faults[{index}] ({entry.get('test', '?')!r})"
        if _REQUIRED - set(entry) or set(entry) - _FIELDS:
            raise RegistryError(
                f"{where}: needs {sorted(_REQUIRED)} and may have patch and error; has "
                f"{sorted(entry)}."
            )
        if not isinstance(entry["line"], int) or not all(
            isinstance(entry[key], str) for key in entry if key != "line"
        ):
            raise RegistryError(f"{where}: line must be an integer, every other field a string.")
        if entry.get("patch") and not entry["patch"].endswith(".patch"):
            raise RegistryError(f"{where}: patch must name a patch file of the series.")
        if entry.get("error"):
            try:
                re.compile(entry["error"])
            except re.error as error:
                raise RegistryError(
                    f"{where}: error is not a regular expression: {error}"
                ) from None
        faults.append(TorchFault(**entry))
    return tuple(faults)


@cache
def registry() -> tuple[TorchFault, ...]:
    """The packaged registry."""
    text = (resources.files("conformance") / "torch_faults.toml").read_text(encoding="utf-8")
    return parse(text)


def find(
    nodeid: str,
    failure: str,
    applied_patches: tuple[str, ...] = (),
    faults: tuple[TorchFault, ...] | None = None,
) -> TorchFault | None:
    """The torch fault that explains this failure of ``nodeid``, or None (the backend's own).

    An entry whose patch is applied to the running torch explains nothing: the test must pass.
    """
    for fault in registry() if faults is None else faults:
        if fault.patch and fault.patch in applied_patches:
            continue
        if fault.matches(nodeid, failure):
            return fault
    return None
