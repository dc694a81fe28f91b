"""torch.distributed: the backend's process group (the one torch.distributed registers for its
device type: nccl for cuda, xccl for xpu, gloo for the CPU, a vendor's own) gives, on 2 real
processes, the results of gloo on CPU tensors for each collective, and DDP and FSDP2
(``fully_shard``) training steps give the parameters of one process training on every rank's
batch.

The two ranks are launched once for the module (conformance/_distributed_worker.py, on
127.0.0.1 and a free port); each test reads its scenario's verdict from both ranks.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from . import _distributed_worker as worker
from .backend import Backend
from .isolation import _plugin_arguments
from .requirements import require

WORLD_SIZE = 2
LAUNCH_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(backend: Backend, plugins: list[str], out: Path) -> dict[int, dict | str]:
    """Run both ranks to completion; {rank: its verdicts, or why it wrote none}."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    env[worker.PLUGINS_ENV] = ",".join(plugins)
    # The ranks import this package as the test process does (an installed copy, or a checkout).
    package_parent = str(Path(worker.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    port = str(_free_port())
    command = [sys.executable, "-m", "conformance._distributed_worker", backend.name]
    processes = [
        subprocess.Popen(
            [*command, str(rank), str(WORLD_SIZE), port, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD_SIZE)
    ]
    outputs = {}
    for rank, process in enumerate(processes):
        try:
            outputs[rank] = process.communicate(timeout=LAUNCH_TIMEOUT_S)[0]
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            outputs[rank] = f"did not finish in {LAUNCH_TIMEOUT_S}s"
    verdicts: dict[int, dict | str] = {}
    for rank in range(WORLD_SIZE):
        path = out / f"rank{rank}.json"
        if path.exists():
            verdicts[rank] = json.loads(path.read_text())
        else:
            code = processes[rank].returncode
            verdicts[rank] = f"rank {rank} wrote no result (exit {code}):\n{outputs[rank][-3000:]}"
    return verdicts


@pytest.fixture(scope="module")
def verdicts(
    backend: Backend, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, dict | str]:
    """Both ranks' verdicts, from one launch for the whole module."""
    require(backend, "distributed")
    if not backend.is_cpu and backend.device_count < WORLD_SIZE:
        pytest.skip(
            f"not applicable: {WORLD_SIZE} ranks need {WORLD_SIZE} devices, {backend.name} has "
            f"{backend.device_count}"
        )
    plugins = _plugin_arguments(request.config)[1::2]
    # With pytest-xdist the module's tests are spread over the workers, each with this fixture:
    # the first worker launches the ranks, the others wait for its verdicts (the workers of one
    # run share the parent of their temporary directories; a run without xdist has its own).
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    verdicts_file = shared / f"conformance-distributed-{backend.name}.json"
    with open(shared / f"conformance-distributed-{backend.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not verdicts_file.exists():
            launched = _launch(backend, plugins, tmp_path_factory.mktemp("distributed"))
            verdicts_file.write_text(json.dumps({str(k): v for k, v in launched.items()}))
    return {int(rank): verdict for rank, verdict in json.loads(verdicts_file.read_text()).items()}


@pytest.mark.parametrize("scenario", worker.SCENARIOS)
def test_scenario_matches_gloo_on_cpu(verdicts, backend, scenario):
    problems = []
    for rank, verdict in sorted(verdicts.items()):
        if isinstance(verdict, str):
            problems.append(verdict)
        elif scenario not in verdict:
            problems.append(f"rank {rank} did not reach {scenario}")
        elif verdict[scenario] is not None:
            problems.append(f"rank {rank}: {verdict[scenario]}")
    assert not problems, (
        f"{scenario} on {backend.name}'s process group, 2 processes:\n" + "\n".join(problems)
    )
