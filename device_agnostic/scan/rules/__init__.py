"""The scan rules, one class per rule; ``ALL_RULES`` lists one instance of each, by id.

Ids: DA1xx are CUDA assumptions; DA9xx are reserved for inputs the scan could not read
(see ``device_agnostic.scan.engine``).
"""

from __future__ import annotations

from .amp import CudaAmp
from .backends import (
    CudaProfilerActivity,
    CudnnBenchmarkHint,
    CudnnFlags,
    NcclBackend,
    NvtxRange,
    Tf32Switches,
)
from .base import REVIEW, SAFE, Context, Finding, Rule
from .checks import CudaTypeComparison, IsCudaAttribute, PrivateUse1Comparison
from .cuda_api import CudaApiWithGenericEquivalent
from .devices import CudaDefaultArgument, CudaDeviceLiteral, DotCudaCall
from .legacy import CudaVisibleDevices, LegacyCudaTensorType

ALL_RULES: tuple[Rule, ...] = tuple(
    sorted(
        (
            CudaApiWithGenericEquivalent(),
            DotCudaCall(),
            CudaDeviceLiteral(),
            CudaDefaultArgument(),
            CudaAmp(),
            IsCudaAttribute(),
            CudaTypeComparison(),
            PrivateUse1Comparison(),
            CudnnFlags(),
            NcclBackend(),
            NvtxRange(),
            Tf32Switches(),
            CudaProfilerActivity(),
            LegacyCudaTensorType(),
            CudaVisibleDevices(),
            CudnnBenchmarkHint(),
        ),
        key=lambda rule: rule.id,
    )
)

__all__ = ["ALL_RULES", "REVIEW", "SAFE", "Context", "Finding", "Rule"]
