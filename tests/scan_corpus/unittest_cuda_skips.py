"""A unittest module for a small layer: device-generic tests written for CUDA (skipped without
it), and tests of CUDA-only features that must stay CUDA-only. Run as a script, it prints what
ran, what was skipped and what failed."""

import json
import sys
import unittest

import torch
from torch import nn


def rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNormTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.x = torch.randn(4, 8)
        self.weight = torch.rand(8) + 0.5

    def test_matches_reference_on_cpu(self):
        expected = self.x / self.x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * self.weight
        torch.testing.assert_close(rms_norm(self.x, self.weight), expected)

    @unittest.skipIf(not torch.cuda.is_available(), "needs CUDA")  # expect: DA101
    def test_gpu_matches_cpu(self):
        out = rms_norm(self.x.to("cuda"), self.weight.to("cuda"))  # expect: DA103 DA103
        torch.testing.assert_close(out.cpu(), rms_norm(self.x, self.weight))

    @unittest.skipUnless(torch.cuda.is_available(), "needs CUDA")  # expect: DA101
    def test_gpu_backward(self):
        x = self.x.cuda().requires_grad_()  # expect: DA102
        rms_norm(x, self.weight.cuda()).sum().backward()  # expect: DA102
        self.assertTrue(torch.isfinite(x.grad).all().item())


@unittest.skipIf(not torch.cuda.is_available(), "cuDNN and CUDA graphs need CUDA")  # expect: none
class CudaOnlyFeaturesTest(unittest.TestCase):
    def test_cudnn_is_used(self):
        self.assertIsNotNone(torch.backends.cudnn.version())
        self.assertTrue(torch.backends.cudnn.is_available())

    def test_cuda_graph_capture(self):
        x = torch.zeros(4, device="cuda")  # expect: none
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            x.add_(1)
        graph.replay()
        self.assertEqual(x.sum().item(), 8)


class SeededModuleTest(unittest.TestCase):
    def test_linear_is_deterministic(self):
        outs = []
        for _ in range(2):
            torch.manual_seed(5)
            outs.append(nn.Linear(3, 2)(torch.ones(1, 3)))
        torch.testing.assert_close(outs[0], outs[1])


def main():
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(suite)
    print(
        json.dumps(
            {
                "tests_run": result.testsRun,
                "skipped": len(result.skipped),
                "failures": [t.id() for t, _ in result.failures],
                "errors": [t.id() for t, _ in result.errors],
                "ok": result.wasSuccessful(),
            }
        )
    )


if __name__ == "__main__":
    main()
