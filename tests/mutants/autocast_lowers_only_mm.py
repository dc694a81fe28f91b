"""A backend whose autocast lowers fewer ops than CUDA's, on purpose (OpenReg lowers only mm):
every autocast kernel of neuron but mm's falls through, so those ops run in their inputs' dtype.

Not a bug: a policy a manifest declares (autocast_lower_precision_ops, autocast_float32_ops).
tests/test_conformance_vendor.py proves the suite holds the backend to its declared lists, and
that `conformance init` probes them."""

import warnings

import torch

# CUDA's lists as test_autocast.py knows them, less mm (matmul on matrices is mm underneath)
# and cdist (which has no bfloat16 kernel on the CPU that neuron runs it on).
_FALL_THROUGH = (
    "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d",
    "softmax.int", "log_softmax.int", "layer_norm", "group_norm", "exp", "log", "sum",
    "sum.dim_IntList", "cumsum", "pow.Tensor_Scalar", "prod", "mse_loss", "l1_loss", "nll_loss",
    "cross_entropy_loss", "binary_cross_entropy_with_logits",
)  # fmt: skip

_library = torch.library.Library("aten", "IMPL")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
    for _op in _FALL_THROUGH:
        _library.impl(_op, torch.library.fallthrough_kernel, "AutocastPrivateUse1")
