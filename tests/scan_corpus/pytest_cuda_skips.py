"""pytest tests of a fused bias+GELU helper: a device parameter whose "cuda" case is skipped
without a GPU, a requires_cuda marker, and a CUDA-only test of the CUDA caching allocator.
Run as a script, it runs itself under pytest and prints the outcomes."""

import json
import os

import pytest
import torch

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")  # expect: DA101
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]  # expect: any


def bias_gelu(x, bias):
    y = x + bias
    return 0.5 * y * (1.0 + torch.tanh(0.7978845608 * (y + 0.044715 * y.pow(3))))


@pytest.mark.parametrize("device", DEVICES)
def test_matches_exact_gelu(device):
    torch.manual_seed(0)
    x, bias = torch.randn(16, 8), torch.randn(8)
    out = bias_gelu(x.to(device), bias.to(device))
    torch.testing.assert_close(out.cpu(), torch.nn.functional.gelu(x + bias), atol=1e-3, rtol=1e-3)


@requires_cuda
def test_half_precision_on_gpu():
    x = torch.randn(4, 8, device="cuda", dtype=torch.float16)  # expect: DA103
    assert bias_gelu(x, torch.zeros(8, device="cuda", dtype=torch.float16)).dtype == torch.float16  # expect: DA103


@pytest.mark.skipif(not torch.cuda.is_available(), reason="tests the CUDA caching allocator")  # expect: none
def test_caching_allocator_reuses_blocks():
    torch.cuda.empty_cache()  # expect: none
    x = torch.empty(1 << 20, device="cuda")  # expect: none
    del x
    assert torch.cuda.memory_reserved() >= 1 << 22  # expect: none
    assert "cudaMalloc retries" in torch.cuda.memory_summary()


class Outcomes:
    def __init__(self):
        self.counts = {"passed": 0, "skipped": 0, "failed": 0}
        self.failed = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.counts[report.outcome] += 1
            if report.outcome == "failed":
                self.failed.append(report.nodeid.split("::")[-1])


if __name__ == "__main__":
    os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # only this file's tests
    outcomes = Outcomes()
    code = pytest.main(
        [__file__, "-q", "-p", "no:cacheprovider", "-W", "ignore"],
        plugins=[outcomes],
    )
    print(json.dumps({**outcomes.counts, "failed_tests": outcomes.failed, "exit": int(code)}))
