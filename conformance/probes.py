"""Probes: what a backend can do, found by trying it. ``test_capabilities.py`` holds a manifest to
these answers; ``conformance init NAME`` writes them as a manifest for the vendor to review, and
``--capabilities=probed`` runs the suite on them (labelled "probed, not declared").

Each probe returns (works, evidence): the evidence is the one line a reviewer needs to judge it.
A probe never raises for a missing feature: any exception is the answer "no", with its message.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable

import torch

from .manifest import CAPABILITY_FLAGS, Capabilities, Manifest

# Every dtype a manifest may declare, in the order manifests list them.
CANDIDATE_DTYPES = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
AUTOCAST_CANDIDATES = (torch.bfloat16, torch.float16)

Probe = tuple[bool, str]


def _attempt(check: Callable[[], Probe]) -> Probe:
    try:
        return check()
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0][:160]
        return False, f"{type(error).__name__}: {first}"


def dtype_works(device: torch.device, dtype: torch.dtype) -> Probe:
    """ones + ones on the device equals the CPU's (test_capabilities.py holds the core dtypes to
    it). float8 has no add, not even on the CPU: a round trip through float32 instead."""

    def check() -> Probe:
        if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            tensor = torch.ones(3, device=device).to(dtype)
            works = torch.equal(tensor.float().cpu(), torch.ones(3))
            return works, "a float32 round trip matches the CPU" if works else "wrong values"
        tensor = torch.ones(3, dtype=dtype, device=device)
        reference = torch.ones(3, dtype=dtype)
        works = torch.equal((tensor + tensor).cpu(), reference + reference)
        return works, "ones + ones matches the CPU" if works else "ones + ones differs from the CPU"

    return _attempt(check)


def multiple_devices(device: torch.device) -> Probe:
    count = torch.accelerator.device_count()
    return count >= 2, f"torch.accelerator.device_count() is {count}"


def streams(device: torch.device) -> Probe:
    def check() -> Probe:
        stream = torch.Stream(device=device)
        with stream:
            result = torch.ones(4, device=device).mul_(2)
        stream.synchronize()
        works = stream.query() and torch.equal(result.cpu(), torch.full((4,), 2.0))
        return works, "torch.Stream runs work and synchronizes"

    return _attempt(check)


def event_timing(device: torch.device) -> Probe:
    def check() -> Probe:
        start = torch.Event(device=device, enable_timing=True)
        end = torch.Event(device=device, enable_timing=True)
        start.record()
        torch.ones(1000, device=device).sum()
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end)
        return elapsed >= 0, f"elapsed_time is {elapsed:.3f} ms"

    return _attempt(check)


def memory_stats(device: torch.device) -> Probe:
    def check() -> Probe:
        before = torch.accelerator.memory_allocated(device.index)
        tensor = torch.empty(1 << 20, dtype=torch.uint8, device=device)
        grown = torch.accelerator.memory_allocated(device.index) - before
        del tensor
        return grown >= 1 << 20, f"a 1 MiB tensor grew memory_allocated by {grown} bytes"

    return _attempt(check)


def memory_capacity(device: torch.device) -> Probe:
    """get_memory_info reports a capacity, and asking for twice of it raises OutOfMemoryError."""

    def check() -> Probe:
        free, total = torch.accelerator.get_memory_info(device.index)
        if not 0 <= free <= total or total <= 0:
            return False, f"get_memory_info() is ({free}, {total})"
        try:
            torch.empty(2 * total, dtype=torch.uint8, device=device)
        except torch.OutOfMemoryError:
            return True, f"capacity {total} bytes; twice that raises OutOfMemoryError"
        return False, f"allocating twice the capacity ({2 * total} bytes) succeeded"

    return _attempt(check)


def pinned_memory(device: torch.device) -> Probe:
    def check() -> Probe:
        pinned = torch.ones(16).pin_memory()
        return pinned.is_pinned(), f"is_pinned() is {pinned.is_pinned()}"

    return _attempt(check)


def per_device_rng(device: torch.device) -> Probe:
    """The device module's generator functions (torch.random.fork_rng and checkpoint use them),
    and the device's random operators drawing from that generator: a draw advances its state,
    and restoring the state replays the draw. A generator that exists while the operators draw
    from another (the CPU's, copied over) is no per-device RNG."""

    def check() -> Probe:
        module = torch.get_device_module(device.type)
        index = device.index or 0
        state = module.get_rng_state(index)
        if not (isinstance(state, torch.Tensor) and state.dtype == torch.uint8):
            return False, f"{module.__name__}.get_rng_state({index}) gives a {type(state).__name__}"
        first = torch.rand(64, device=device).cpu()
        after = module.get_rng_state(index)
        module.set_rng_state(state, index)
        replayed = torch.rand(64, device=device).cpu()
        module.set_rng_state(after, index)
        if torch.equal(after, state):
            return False, (
                f"torch.rand on {device} left {module.__name__}.get_rng_state({index}) unchanged: "
                "it does not draw from the device's generator"
            )
        if not torch.equal(first, replayed):
            return False, (
                f"restoring {module.__name__}.get_rng_state({index}) does not replay torch.rand "
                f"on {device}: it does not draw from the device's generator"
            )
        return True, (
            f"torch.rand on {device} advances {module.__name__}.get_rng_state({index}), and "
            "restoring it replays the draw"
        )

    return _attempt(check)


def serialization(device: torch.device) -> Probe:
    def check() -> Probe:
        buffer = io.BytesIO()
        torch.save(torch.arange(3.0, device=device), buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)
        return loaded.device.type == device.type, f"a saved tensor loads onto {loaded.device}"

    return _attempt(check)


def autocast_dtype(device: torch.device, dtype: torch.dtype) -> Probe:
    def check() -> Probe:
        a = torch.ones(4, 4, device=device)
        with torch.autocast(device.type, dtype=dtype):
            result = torch.mm(a, a)
        return result.dtype == dtype, f"mm under autocast gives {result.dtype}"

    return _attempt(check)


def autocast_op_dtype(device: torch.device, op: Callable, dtype: torch.dtype, operands) -> Probe:
    """The dtype ``op`` computes in under autocast(dtype) (evidence: that dtype's name)."""

    def check() -> Probe:
        a, b = (t.to(device) for t in operands)
        with torch.autocast(device.type, dtype=dtype):
            result = op(a, b)
        return True, str(result.dtype).removeprefix("torch.")

    return _attempt(check)


def compile(device: torch.device) -> Probe:
    """torch.compile's default backend (inductor) runs a small function on the device."""

    def check() -> Probe:
        def function(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x * 2 + 1).sum(0)

        x = torch.arange(12.0).reshape(3, 4).sub(5)
        result = torch.compile(function, fullgraph=True)(x.to(device))
        works = result.device.type == device.type and torch.equal(result.cpu(), function(x))
        return (
            works,
            f"a compiled function gives {'the eager result' if works else result} "
            f"on {result.device}",
        )

    return _attempt(check)


def distributed(device: torch.device) -> Probe:
    """torch.distributed has a process group for the device: one rank all_reduces a tensor."""

    def check() -> Probe:
        import torch.distributed as dist

        if not dist.is_available():
            return False, "torch.distributed is not available"
        name = "gloo" if device.type == "cpu" else dist.get_default_backend_for_device(device)
        if dist.is_initialized():
            return False, "a process group is already initialized; probe in a fresh process"
        dist.init_process_group(name, rank=0, world_size=1, store=dist.HashStore())
        try:
            tensor = torch.ones(4, device=device)
            dist.all_reduce(tensor)
            works = torch.equal(tensor.cpu(), torch.ones(4))
        finally:
            dist.destroy_process_group()
        return works, f"a one-rank {name!r} process group all_reduces a {device.type} tensor"

    return _attempt(check)


# The profiler activities of the devices torch knows by name; any other accelerator is PrivateUse1.
PROFILER_ACTIVITIES = {"cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "mtia": "MTIA", "hpu": "HPU"}


def profiler(device: torch.device) -> Probe:
    """torch.profiler records device time for a matmul on the device."""

    def check() -> Probe:
        from torch.profiler import ProfilerActivity, profile

        if device.type == "cpu":
            return False, "the CPU has no device activity (its time is host time)"
        activity = getattr(ProfilerActivity, PROFILER_ACTIVITIES.get(device.type, "PrivateUse1"))
        x = torch.ones(256, 256, device=device)
        with profile(activities=[ProfilerActivity.CPU, activity]) as prof:
            (x @ x).sum()
            torch.accelerator.synchronize(device.index)
        device_time = sum(e.device_time_total for e in prof.key_averages() if e.key == "aten::mm")
        return (
            device_time > 0,
            f"aten::mm has {device_time:.1f} us of device time under {activity.name}",
        )

    return _attempt(check)


FLAG_PROBES: dict[str, Callable[[torch.device], Probe]] = {
    "multiple_devices": multiple_devices,
    "streams": streams,
    "event_timing": event_timing,
    "memory_stats": memory_stats,
    "memory_capacity": memory_capacity,
    "pinned_memory": pinned_memory,
    "per_device_rng": per_device_rng,
    "serialization": serialization,
    "compile": compile,
    "distributed": distributed,
    "profiler": profiler,
}
assert set(FLAG_PROBES) == set(CAPABILITY_FLAGS), "a capability flag without a probe"


@dataclasses.dataclass(frozen=True)
class Probed:
    """Every probe's answer for one backend."""

    backend: str
    dtypes: dict[torch.dtype, Probe]
    flags: dict[str, Probe]
    autocast_dtypes: dict[torch.dtype, Probe]
    # op name -> the dtype it computes in under autocast (None: no autocast dtype works)
    lower_precision_ops: dict[str, Probe]
    float32_ops: dict[str, Probe]

    def capabilities(self) -> Capabilities:
        def works(probes: dict) -> frozenset:
            return frozenset(key for key, (ok, _) in probes.items() if ok)

        autocast = works(self.autocast_dtypes)
        return Capabilities(
            dtypes=works(self.dtypes),
            autocast_dtypes=autocast,
            autocast_lower_precision_ops=self._lower() if autocast else None,
            autocast_float32_ops=self._float32() if autocast else None,
            **{flag: ok for flag, (ok, _) in self.flags.items()},
        )

    def _lower(self) -> frozenset[str]:
        dtype = self._autocast_dtype()
        return frozenset(
            name for name, (ok, seen) in self.lower_precision_ops.items() if ok and seen == dtype
        )

    def _float32(self) -> frozenset[str]:
        return frozenset(
            name for name, (ok, seen) in self.float32_ops.items() if ok and seen == "float32"
        )

    def _autocast_dtype(self) -> str:
        dtype = next(d for d in AUTOCAST_CANDIDATES if self.autocast_dtypes[d][0])
        return str(dtype).removeprefix("torch.")

    def manifest(self) -> Manifest:
        """A manifest of the probed capabilities, without known failures, marked probed."""
        source = f"probed, not declared (`conformance init {self.backend}` writes it to review)"
        return Manifest(self.backend, source, self.capabilities(), (), probed=True)


def probe(backend: str) -> Probed:
    """Run every probe on ``backend``'s first device (the backend must be registered)."""
    from . import test_autocast  # its op tables are the autocast lists a manifest may declare

    device = torch.device("cpu") if backend == "cpu" else torch.device(backend, 0)
    autocast = {dtype: autocast_dtype(device, dtype) for dtype in AUTOCAST_CANDIDATES}
    usable = next((d for d in AUTOCAST_CANDIDATES if autocast[d][0]), None)
    lower: dict[str, Probe] = {}
    float32: dict[str, Probe] = {}
    if usable is not None:
        full = test_autocast._operands(torch.device("cpu"))
        low = test_autocast._operands(torch.device("cpu"), usable)
        ops = {
            **test_autocast.LOWER_PRECISION,
            **{n: op for n, (op, _) in test_autocast.FLOAT32.items()},
        }
        for name, op in sorted(ops.items()):
            if name in test_autocast.LOWER_PRECISION:
                lower[name] = autocast_op_dtype(device, op, usable, full)
            if name in test_autocast.FLOAT32:
                float32[name] = autocast_op_dtype(device, op, usable, low)
    return Probed(
        backend=backend,
        dtypes={dtype: dtype_works(device, dtype) for dtype in CANDIDATE_DTYPES},
        flags={flag: check(device) for flag, check in FLAG_PROBES.items()},
        autocast_dtypes=autocast,
        lower_precision_ops=lower,
        float32_ops=float32,
    )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def manifest_text(probed: Probed) -> str:
    """The manifest ``conformance init`` writes: every capability filled, each with the probe's
    evidence as a comment for the vendor to review; no known failures."""
    caps = probed.capabilities()
    lines = [
        f"# {probed.backend}: written by `conformance init {probed.backend}` from probes of "
        f"{probed.backend}:0 with torch {torch.__version__}.",
        "# REVIEW every line: a probe sees what works once, not what the backend promises. A",
        "# capability set to false is an expectation (the tests expect a clear error), not a skip.",
        "# Known failures: none. Add each one yourself, with a reason and a link where it is",
        "# tracked (docs/conformance-vendor-guide.md); they are never copied from another backend.",
        "[capabilities]",
        "dtypes = [",
    ]
    for dtype, (ok, evidence) in probed.dtypes.items():
        mark = "" if ok else "# "
        lines.append(f'    {mark}"{_name(dtype)}",{"" if ok else "  "}  # {evidence}')
    lines.append("]")
    autocast = [f'"{_name(d)}"' for d in AUTOCAST_CANDIDATES if probed.autocast_dtypes[d][0]]
    evidence = "; ".join(f"{_name(d)}: {e}" for d, (_, e) in probed.autocast_dtypes.items())
    lines.append(f"autocast_dtypes = [{', '.join(autocast)}]  # {evidence}")
    for flag, (ok, evidence) in probed.flags.items():
        lines.append(f"{flag} = {str(ok).lower()}  # {evidence}")
    if caps.autocast_lower_precision_ops is not None:
        dtype = probed._autocast_dtype()
        for field, ops, table, want in (
            (
                "autocast_lower_precision_ops",
                caps.autocast_lower_precision_ops,
                probed.lower_precision_ops,
                f"{dtype}, from float32 operands",
            ),
            (
                "autocast_float32_ops",
                caps.autocast_float32_ops,
                probed.float32_ops,
                f"float32, from {dtype} operands",
            ),
        ):
            lines.append(f"# the ops autocast computes in {want} (probed: the dtype each gave)")
            lines.append(f"{field} = [")
            for name, (_, seen) in table.items():
                mark = "" if name in ops else "# "
                lines.append(f'    {mark}"{name}",  # {seen}')
            lines.append("]")
    return "\n".join(lines) + "\n"
