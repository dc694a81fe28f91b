"""The legacy typed-storage classes of torch.neuron (``torch.neuron.FloatStorage``, ...).

``tensor.storage_type()`` asks the device module for a class named after the dtype
(``torch.storage.TypedStorage._get_legacy_storage_class``): CUDA answers
``torch.cuda.FloatStorage``, and a PrivateUse1 module without them makes it return None, which
code written for CUDA then calls. The classes are the ones torch.cuda defines, for neuron:
TypedStorage finds their device from the last part of their ``__module__`` (``torch.neuron``),
so ``torch.neuron.FloatStorage(4)`` allocates on neuron and ``isinstance(t.storage(),
torch.neuron.FloatStorage)`` holds for a float32 neuron tensor, as on CUDA.
"""

from __future__ import annotations

import torch
from torch.storage import _LegacyStorage, _warn_typed_storage_removal

MODULE_NAME = "torch.neuron"

# The dtype of each class torch.cuda defines, by its name.
STORAGE_DTYPES = {
    "ByteStorage": torch.uint8,
    "DoubleStorage": torch.double,
    "FloatStorage": torch.float,
    "HalfStorage": torch.half,
    "LongStorage": torch.long,
    "IntStorage": torch.int,
    "ShortStorage": torch.short,
    "CharStorage": torch.int8,
    "BoolStorage": torch.bool,
    "BFloat16Storage": torch.bfloat16,
    "ComplexDoubleStorage": torch.cdouble,
    "ComplexFloatStorage": torch.cfloat,
}


class _classproperty:
    """A read-only property of the class (torch's ``classproperty``, whose module is private)."""

    def __init__(self, getter):
        self.getter = getter

    def __get__(self, instance, owner):
        return self.getter(owner)


class _NeuronLegacyStorage(_LegacyStorage):
    """What the neuron storage classes share: as torch.cuda's, no CPU-only constructors."""

    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError("from_buffer: Not available for neuron storage")

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError("_new_with_weak_ptr: Not available for neuron storage")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError("_new_shared_filename: Not available for neuron storage")


def _make(name: str, dtype: torch.dtype) -> type:
    def dtype_of(cls) -> torch.dtype:
        _warn_typed_storage_removal()
        return dtype

    return type(
        name,
        (_NeuronLegacyStorage,),
        {
            "__module__": MODULE_NAME,
            "__qualname__": name,
            "dtype": _classproperty(dtype_of),
            "_dtype": _classproperty(lambda cls: dtype),
        },
    )


def storage_classes() -> dict[str, type]:
    """One class per name of STORAGE_DTYPES, registered in ``torch._storage_classes``."""
    classes = {name: _make(name, dtype) for name, dtype in STORAGE_DTYPES.items()}
    torch._storage_classes.update(classes.values())
    return classes
