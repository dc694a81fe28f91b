"""The patch queue: check, apply, status and revert the series in ``patches/``.

Targets are a PyTorch git checkout (the series becomes commits on a new branch, ``git am -3 -k``)
or an installed torch package of the base version (the ``torch/`` hunks are overlaid in place,
with byte-exact backups). Every command is all or nothing: on any failure the target is left
exactly as it was. Nothing here imports torch or the neuron backend.
"""

from tools.patchqueue.errors import BadInput, Conflict, PatchQueueError
from tools.patchqueue.series import Series, load_series

__all__ = ["BadInput", "Conflict", "PatchQueueError", "Series", "load_series"]
