"""Fork safety of the neuron backend, like CUDA's: a child forked after neuron was initialized
cannot use it (RuntimeError naming 'forked subprocess' and 'spawn'), may still seed, and
DataLoader fork workers and 'spawn' children work.

Each scenario runs in a fresh interpreter of its own (a copy of SCRIPT in tmp_path, so that
'spawn' children can import it), never inside the pytest-xdist worker. Children report through a
pipe or queue and their exit code; every wait has a deadline, so a hang fails instead of blocking.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SUBPROCESS_TIMEOUT_S = 90
CHILD_RAISED_EXIT_CODE = 17

SCRIPT = textwrap.dedent(
    """
    import json
    import multiprocessing as mp
    import os
    import select
    import sys
    import time

    import torch

    CHILD_TIMEOUT_S = 30
    CHILD_RAISED_EXIT_CODE = __EXIT_CODE__


    def touch_neuron_in_bad_fork():
        report = {"bad_fork": torch.neuron._is_in_bad_fork()}
        try:
            torch.manual_seed(1234)
            first = torch.randn(3).tolist()
            torch.seed()
            torch.neuron.manual_seed(5)
            torch.neuron.manual_seed_all(5)
            torch.manual_seed(1234)
            report["cpu_after_seed"] = torch.randn(3).tolist() == first
            report["seed"] = "ok"
        except Exception as error:
            report["seed"] = repr(error)
        errors = {}
        operations = {
            "empty": lambda: torch.empty(4, device="neuron"),
            "to": lambda: torch.arange(3).to("neuron:1"),
            "compute_on_inherited": lambda: INHERITED + 1,
            "init": torch.neuron.init,
        }
        for name, operation in operations.items():
            try:
                operation()
                errors[name] = None
            except RuntimeError as error:
                errors[name] = str(error)
        report["errors"] = errors
        raised = all(message is not None for message in errors.values())
        return report, (CHILD_RAISED_EXIT_CODE if raised else 0)


    def mp_fork_child(queue):
        report, code = touch_neuron_in_bad_fork()
        queue.put(report)
        queue.close()
        queue.join_thread()
        sys.exit(code)


    def wait_pid(pid):
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.01)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return "hung"


    def read_pipe(fd):
        chunks = []
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks).decode()


    def fork_with_os(body):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(read_fd)
                report, code = body()
                os.write(write_fd, json.dumps(report).encode())
            finally:
                os._exit(code)
        os.close(write_fd)
        text = read_pipe(read_fd)
        os.close(read_fd)
        return {"child": json.loads(text) if text else None, "exit": wait_pid(pid)}


    def parent_still_works():
        return (torch.arange(4.0, device="neuron") * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


    def scenario_os_fork():
        global INHERITED
        INHERITED = torch.ones(4, device="neuron")  # initializes neuron
        result = fork_with_os(touch_neuron_in_bad_fork)
        result["parent_ok"] = parent_still_works()
        return result


    def scenario_mp_fork():
        global INHERITED
        INHERITED = torch.ones(4, device="neuron")
        ctx = mp.get_context("fork")
        queue = ctx.Queue()
        process = ctx.Process(target=mp_fork_child, args=(queue,))
        process.start()
        try:
            child = queue.get(timeout=CHILD_TIMEOUT_S)
        except Exception as error:
            child = {"queue_error": repr(error)}
        process.join(CHILD_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
            return {"child": child, "exit": "hung"}
        return {"child": child, "exit": process.exitcode, "parent_ok": parent_still_works()}


    def use_neuron_in_clean_fork():
        report = {"bad_fork": torch.neuron._is_in_bad_fork()}
        x = torch.arange(6.0, device="neuron:1").reshape(2, 3)
        report["value"] = (x @ x.t()).cpu().tolist()
        report["initialized"] = torch.neuron.is_initialized()
        return report, 0


    def scenario_fork_before_init():
        initialized_before = torch.neuron.is_initialized()
        result = fork_with_os(use_neuron_in_clean_fork)
        result["initialized_before"] = initialized_before
        result["parent_ok"] = parent_still_works()
        return result


    def spawn_child(queue):
        reports = []
        for device in ("neuron:0", "neuron:1"):
            a = torch.arange(12.0, device=device).reshape(3, 4)
            result = (a @ a.t() + torch.ones(3, 3, device=device)).sum(dim=1)
            reports.append({"device": str(result.device), "value": result.cpu().tolist()})
        queue.put(reports)


    def scenario_spawn():
        torch.ones(4, device="neuron")  # the parent initialized neuron before spawning
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        child = ctx.Process(target=spawn_child, args=(queue,))
        child.start()
        try:
            reports = queue.get(timeout=CHILD_TIMEOUT_S)
        except Exception as error:
            reports = [{"queue_error": repr(error)}]
        child.join(CHILD_TIMEOUT_S)
        if child.is_alive():
            child.kill()
            child.join()
            exit_code = "hung"
        else:
            exit_code = child.exitcode
        a = torch.arange(12.0).reshape(3, 4)
        expected = (a @ a.t() + torch.ones(3, 3)).sum(dim=1).tolist()
        return {"child": reports, "exit": exit_code, "expected": expected}


    class Squares(torch.utils.data.Dataset):
        def __len__(self):
            return 23

        def __getitem__(self, index):
            info = torch.utils.data.get_worker_info()
            return (torch.tensor([index, index * index], dtype=torch.float32),
                    torch.tensor(-1 if info is None else info.id))


    def seed_in_worker(worker_id):
        torch.manual_seed(worker_id)
        torch.neuron.manual_seed_all(worker_id)


    def scenario_dataloader():
        torch.ones(4, device="neuron")  # neuron initialized in the parent before the workers fork
        loader = torch.utils.data.DataLoader(
            Squares(), batch_size=5, num_workers=2, multiprocessing_context="fork",
            worker_init_fn=seed_in_worker, timeout=CHILD_TIMEOUT_S)
        rows, workers, devices = [], set(), set()
        for batch, worker in loader:
            on_device = batch.to("neuron:1")
            devices.add(str(on_device.device))
            rows.extend((on_device * 2 + 1).cpu().tolist())
            workers.update(worker.tolist())
        expected = [[2.0 * i + 1, 2.0 * i * i + 1] for i in range(23)]
        return {"rows_ok": rows == expected, "workers": sorted(workers),
                "devices": sorted(devices), "start_method": mp.get_start_method()}


    if __name__ == "__main__":
        scenario = globals()["scenario_" + sys.argv[1]]
        print(json.dumps(scenario()))
    """
).replace("__EXIT_CODE__", str(CHILD_RAISED_EXIT_CODE))


@pytest.fixture
def run_scenario(tmp_path: Path):
    script = tmp_path / "fork_scenarios.py"
    script.write_text(SCRIPT)

    def run(name: str) -> dict:
        result = subprocess.run(
            [sys.executable, str(script), name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
        )
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return json.loads(result.stdout.strip().splitlines()[-1])

    return run


def assert_child_could_not_use_neuron_but_could_seed(result: dict) -> None:
    assert result["exit"] != "hung", "the forked child hung"
    child = result["child"]
    assert child is not None, "the forked child reported nothing"
    assert child["bad_fork"] is True
    assert child["seed"] == "ok"
    assert child["cpu_after_seed"] is True  # the CPU generator was really seeded
    for operation, message in child["errors"].items():
        assert message is not None, f"{operation} worked in a forked child of an initialized parent"
        assert "forked subprocess" in message, (operation, message)
        assert "spawn" in message, (operation, message)
    assert result["exit"] == CHILD_RAISED_EXIT_CODE
    assert result["parent_ok"] is True


def test_os_fork_child_of_an_initialized_parent_cannot_use_neuron_but_can_seed(run_scenario):
    assert_child_could_not_use_neuron_but_could_seed(run_scenario("os_fork"))


def test_multiprocessing_fork_child_of_an_initialized_parent_cannot_use_neuron_but_can_seed(
    run_scenario,
):
    assert_child_could_not_use_neuron_but_could_seed(run_scenario("mp_fork"))


def test_child_forked_before_neuron_was_initialized_can_use_neuron(run_scenario):
    result = run_scenario("fork_before_init")
    assert result["initialized_before"] is False
    assert result["exit"] == 0
    child = result["child"]
    assert child["bad_fork"] is False
    assert child["initialized"] is True
    assert child["value"] == [[5.0, 14.0], [14.0, 50.0]]
    assert result["parent_ok"] is True


def test_spawn_child_of_an_initialized_parent_uses_neuron(run_scenario):
    result = run_scenario("spawn")
    assert result["exit"] == 0
    assert result["child"] == [
        {"device": "neuron:0", "value": result["expected"]},
        {"device": "neuron:1", "value": result["expected"]},
    ]


def test_dataloader_fork_workers_run_after_the_parent_initialized_neuron(run_scenario):
    result = run_scenario("dataloader")
    assert result["rows_ok"] is True
    assert result["workers"] == [0, 1]  # both forked workers produced batches
    assert result["devices"] == ["neuron:1"]
