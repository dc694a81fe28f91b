"""The neuron backend's driver seam: csrc/driver/ is the only code that acts as the device.

A vendor keeps the integration (device_agnostic/neuron/csrc/*.cpp: allocators, guard, streams and
events, hooks, ops, profiler, process group) and replaces the driver (csrc/driver/, its C API in
neuron_driver.h) with calls into their runtime (docs/neuron.md). That only works if the integration
never does the device's work itself: these tests read its sources for the host-memory emulation
(allocating or freeing memory, starting threads, reading the device's environment variables) and
run the driver through the extension.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from device_agnostic.neuron import _C

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "device_agnostic" / "neuron" / "csrc"
DRIVER = CSRC / "driver"
DRIVER_HEADER = DRIVER / "neuron_driver.h"

# The environment variables the integration reads itself: its own policies, not the device's.
INTEGRATION_SETTINGS = {"NEURON_LAUNCH_BLOCKING", "NEURON_DIRECT_KERNELS"}

# Emulation that belongs in the driver, as it appears in C++: calls of the C allocation functions
# (qualified or not; a member function of that name, `x->free(p)`, or its declaration is not one).
ALLOCATION_CALL = re.compile(
    r"(?P<before>[\w.>:]*)\s*\b(?P<name>posix_memalign|aligned_alloc|malloc|calloc|realloc|free)"
    r"\s*\("
)
DECLARATION_TYPES = {"bool", "void", "int", "auto"}
THREAD = re.compile(r"\bstd::j?thread\b|\bpthread_create\s*\(")
GETENV = re.compile(r"\bgetenv\s*\(\s*([^)]*)\)")
# A test helper that allocates device memory from native threads (not a stream): allowed threads.
THREAD_ALLOWED = {"NeuronBindings.cpp"}


def code_of(path: Path) -> str:
    """The C++ in `path` without comments and string literals' contents (kept: getenv's names)."""
    text = path.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def integration_sources() -> list[Path]:
    sources = sorted(p for p in CSRC.rglob("*") if p.suffix in {".cpp", ".h"})
    integration = [p for p in sources if DRIVER not in p.parents]
    assert len(integration) >= 20 and all(p.parent == CSRC for p in integration)
    return integration


def driver_functions() -> list[str]:
    return re.findall(
        r"^\s*(?:ndrvError_t|const char\*)\s+(ndrv\w+)\s*\(",
        DRIVER_HEADER.read_text(),
        flags=re.MULTILINE,
    )


def allocation_calls(code: str) -> list[str]:
    calls = []
    for match in ALLOCATION_CALL.finditer(code):
        before = match.group("before")
        if before.endswith((".", ">")) or before in DECLARATION_TYPES:
            continue  # a member function call, or the declaration of one
        calls.append(f"{before}{match.group('name')}(")
    return calls


def test_the_allocation_scan_finds_what_it_looks_for():
    code = (
        "p = std::malloc(4); posix_memalign(&p, 64, n); ::free(p); free(q); a->free(p); bool free("
    )
    assert allocation_calls(code) == ["std::malloc(", "posix_memalign(", "::free(", "free("]


def test_the_integration_neither_allocates_nor_frees_memory_itself():
    found = {
        p.name: calls for p in integration_sources() if (calls := allocation_calls(code_of(p)))
    }
    assert found == {}, f"memory the driver should allocate (ndrvMalloc/ndrvMallocHost): {found}"


def test_the_integration_starts_no_threads_for_the_device():
    found = {
        p.name: THREAD.findall(code_of(p))
        for p in integration_sources()
        if p.name not in THREAD_ALLOWED and THREAD.search(code_of(p))
    }
    assert found == {}, f"streams run on the driver's workers (ndrvLaunchHostFunc): {found}"


def test_the_integration_reads_only_its_own_settings_from_the_environment():
    read = {
        (p.name, argument.strip())
        for p in integration_sources()
        for argument in GETENV.findall(code_of(p))
    }
    device_settings = {
        (name, argument)
        for name, argument in read
        if argument.strip('"') not in INTEGRATION_SETTINGS
    }
    # NEURON_RT_VISIBLE_CORES and NEURON_DEVICE_MEMORY describe the device: the driver reads them.
    assert device_settings == set(), device_settings
    assert {argument for _, argument in read} == {f'"{name}"' for name in INTEGRATION_SETTINGS}


def test_the_driver_is_plain_c_api_without_torch():
    for path in sorted(DRIVER.iterdir()):
        includes = re.findall(r"#include\s*[<\"]([^>\"]+)[>\"]", path.read_text())
        torch_side = [
            i for i in includes if i.split("/")[0] in {"c10", "ATen", "torch", "Python.h"}
        ]
        assert torch_side == [], f"{path.name} includes {torch_side}"
    header = DRIVER_HEADER.read_text()
    assert 'extern "C" {' in header
    functions = driver_functions()
    assert len(functions) >= 25 and all(f.startswith("ndrv") for f in functions)
    # Each call says what a real runtime does there: a comment on the line(s) just above.
    lines = header.splitlines()
    for name in functions:
        at = next(i for i, line in enumerate(lines) if re.search(rf"\b{name}\s*\(", line))
        above = lines[at - 1].strip()
        assert above.startswith("//") or lines[at - 2].strip().startswith("//"), name


def test_docs_list_every_driver_call():
    docs = (ROOT / "docs" / "neuron.md").read_text()
    missing = [name for name in driver_functions() if f"`{name}`" not in docs]
    assert missing == [], f"docs/neuron.md's driver call list lacks {missing}"


def test_driver_errors_have_the_runtime_strings():
    assert _C._driver_error_string(0) == "no error"
    assert _C._driver_error_string(2) == "out of memory"
    assert _C._driver_error_string(101) == "invalid device ordinal"
    assert _C._driver_error_string(600) == "device not ready"
    assert _C._driver_error_string(12345) == "unrecognized error code"


def test_driver_errors_become_the_torch_errors_cuda_raises():
    with pytest.raises(torch.AcceleratorError) as invalid_device:
        _C._raise_driver_error(101)
    assert invalid_device.value.error_code == 101
    assert "invalid device ordinal" in str(invalid_device.value)
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        _C._raise_driver_error(2)
    with pytest.raises(RuntimeError, match=r"invalid resource handle \(code 400"):
        _C._raise_driver_error(400)


def test_the_driver_knows_device_and_pinned_memory():
    device_tensor = torch.empty(1000, device="neuron:1")
    inside = device_tensor[10:].data_ptr()
    kind, device, base, size = _C._driver_pointer_attributes(inside)
    assert (kind, device) == ("device", 1)
    assert base <= device_tensor.data_ptr() < inside < base + size  # the allocator's segment
    pinned = torch.arange(64.0).pin_memory()
    kind, device, base, size = _C._driver_pointer_attributes(pinned[3:].data_ptr())
    assert (kind, device, base) == ("host", -1, pinned.data_ptr()) and size >= 64 * 4
    plain = torch.arange(64.0)
    assert _C._driver_pointer_attributes(plain.data_ptr())[0] == "unregistered"
    assert not plain.is_pinned() and pinned[3:].is_pinned()
