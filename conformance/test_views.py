"""Views and aliasing: a view shares its base's storage on the device, has the reference's
sizes, strides and offset, and writes through either are visible in the other; as_strided,
in-place operators on non-contiguous views and contiguous() behave as on the reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from .assertions import assert_matches_reference, assert_on_device, reproducer
from .isolation import run_known_failure_in_child
from .strategies import (
    MAKE_SNIPPET,
    TensorSpec,
    apply_view,
    device_views,
    tensor_specs,
    value_kinds,
)

ViewOp = Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]]

# name: (base shape, base dtype, the view as code on ``x``). Each is a view by PyTorch's
# documentation (https://pytorch.org/docs/stable/tensor_view.html).
VIEW_OPS: dict[str, tuple[tuple[int, ...], torch.dtype, str]] = {
    "view": ((4, 6), torch.float32, "x.view(3, 8)"),
    "view_flatten": ((2, 3, 4), torch.float32, "x.view(-1)"),
    "view_dtype": ((4, 6), torch.float32, "x.view(torch.int32)"),
    "reshape": ((4, 6), torch.float32, "x.reshape(2, 12)"),
    "flatten": ((2, 3, 4), torch.float32, "x.flatten(1)"),
    "unflatten": ((4, 6), torch.float32, "x.unflatten(1, (2, 3))"),
    "transpose": ((4, 6), torch.float32, "x.transpose(0, 1)"),
    "t": ((4, 6), torch.float32, "x.t()"),
    "mT": ((2, 3, 4), torch.float32, "x.mT"),
    "permute": ((2, 3, 4), torch.float32, "x.permute(2, 0, 1)"),
    "movedim": ((2, 3, 4), torch.float32, "x.movedim(0, -1)"),
    "narrow": ((4, 6), torch.float32, "x.narrow(1, 2, 3)"),
    "select": ((4, 6), torch.float32, "x.select(0, 2)"),
    "index_int": ((4, 6), torch.float32, "x[1]"),
    "slice_with_steps": ((5, 7), torch.float32, "x[1::2, ::3]"),
    "slice_none_ellipsis": ((2, 3, 4), torch.float32, "x[None, ..., 1:3]"),
    "squeeze": ((4, 1, 6), torch.float32, "x.squeeze(1)"),
    "unsqueeze": ((4, 6), torch.float32, "x.unsqueeze(1)"),
    "expand": ((4, 1), torch.float32, "x.expand(4, 5)"),
    "unfold": ((4, 7), torch.float32, "x.unfold(1, 3, 2)"),
    "diagonal": ((4, 6), torch.float32, "x.diagonal(offset=1)"),
    "as_strided": ((4, 6), torch.float32, "x.as_strided((3, 3), (5, 2), 1)"),
    "split": ((4, 6), torch.float32, "x.split(2, dim=1)"),
    "split_with_sizes": ((4, 6), torch.float32, "x.split([1, 3], dim=0)"),
    "chunk": ((5, 6), torch.float32, "x.chunk(3, dim=0)"),
    "unbind": ((3, 4), torch.float32, "x.unbind(1)"),
    "view_as_real": ((4, 3), torch.complex64, "torch.view_as_real(x)"),
    "view_as_complex": ((4, 3, 2), torch.float32, "torch.view_as_complex(x)"),
    "real": ((4, 3), torch.complex64, "x.real"),
    "imag": ((4, 3), torch.complex64, "x.imag"),
    "int_view": ((4, 6), torch.int32, "x.t()[::2]"),
}


PRINT_VIEWS = "print([t.cpu() for t in (v if isinstance(v, tuple) else (v,))])"


def _view(name: str) -> ViewOp:
    return eval(f"lambda x: {VIEW_OPS[name][2]}")


def _outputs(result: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


def _base(name: str) -> torch.Tensor:
    shape, dtype, _ = VIEW_OPS[name]
    return TensorSpec(shape, dtype, seed=11).make()


def _snippet(name: str, device: torch.device, then: str = "") -> str:
    shape, dtype, code = VIEW_OPS[name]
    return MAKE_SNIPPET + (
        f"x = make({shape}, {dtype}, 11).to('{device}')\n"
        f"v = {code}\n"
        "print(x.untyped_storage().data_ptr(), [t.untyped_storage().data_ptr() for t in "
        "(v if isinstance(v, tuple) else (v,))])\n" + then
    )


def base_on_device(backend, name: str, device: torch.device) -> torch.Tensor | None:
    """The view's base on the device; None when the backend does not declare its dtype, after
    checking that moving it there raises a TypeError."""
    base = _base(name)
    if backend.capabilities.supports(base.dtype):
        return base.to(device)
    with pytest.raises(TypeError):
        base.to(device)
    return None


@pytest.mark.parametrize("name", sorted(VIEW_OPS))
def test_view_shares_the_storage_of_its_base(backend, device, name):
    """The view aliases its base on the device (same storage, ``_base`` is the base) and has the
    reference view's sizes, strides, storage offset and values."""
    base = base_on_device(backend, name, device)
    if base is None:
        return
    reference_base = _base(name)
    expected = _outputs(_view(name)(reference_base))
    actual = _outputs(_view(name)(base))
    snippet = _snippet(name, device)
    assert len(actual) == len(expected)
    for index, (view, reference_view) in enumerate(zip(actual, expected, strict=True)):
        what = f"{VIEW_OPS[name][2]}[{index}]" if len(actual) > 1 else VIEW_OPS[name][2]
        assert_on_device(view, device, what=what)
        assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), (
            f"{what} does not share the storage of its base on {device}" + reproducer(snippet)
        )
        # view(dtype) aliases its base without being an autograd view: compare, don't assume.
        is_view, reference_is_view = view._base is base, reference_view._base is reference_base
        assert is_view == reference_is_view, (
            f"{what}._base is {'' if is_view else 'not '}its base, the reference's is"
            f"{'' if reference_is_view else ' not'}" + reproducer(snippet)
        )
        layout = (view.shape, view.stride(), view.storage_offset())
        reference_layout = (
            reference_view.shape,
            reference_view.stride(),
            reference_view.storage_offset(),
        )
        assert layout == reference_layout, (
            f"{what}: (shape, stride, storage_offset) is {layout}, the reference has "
            f"{reference_layout}" + reproducer(snippet)
        )
        assert_matches_reference(view, reference_view, what=what, snippet=snippet, tolerance=(0, 0))


def _write(tensors: tuple[torch.Tensor, ...]) -> None:
    """A write that changes every element, distinct per output (split's pieces, say)."""
    for index, tensor in enumerate(tensors):
        if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
            tensor.mul_(-2).add_(index + 0.5)
        else:
            tensor.mul_(-2).add_(index + 1)


@pytest.mark.parametrize("name", sorted(VIEW_OPS))
def test_writes_through_a_view_reach_the_base(backend, device, name):
    """An in-place write to the view changes the base as on the reference; a write the reference
    refuses (to an expanded view, whose elements share memory) is refused too."""
    base = base_on_device(backend, name, device)
    if base is None:
        return
    reference_base = _base(name)
    snippet = _snippet(
        name,
        device,
        then="for i, t in enumerate(v if isinstance(v, tuple) else (v,)):\n"
        "    t.mul_(-2).add_(i + 0.5)\nprint(x.cpu())",
    )
    try:
        _write(_outputs(_view(name)(reference_base)))
    except RuntimeError:
        with pytest.raises(RuntimeError):
            _write(_outputs(_view(name)(base)))
        return
    _write(_outputs(_view(name)(base)))
    assert_matches_reference(
        base,
        reference_base,
        what=f"the base after writing through {VIEW_OPS[name][2]}",
        snippet=snippet,
    )


@pytest.mark.parametrize("name", sorted(VIEW_OPS))
def test_writes_to_the_base_reach_the_view(backend, device, name):
    """An in-place write to the base is visible through a view taken before it."""
    base = base_on_device(backend, name, device)
    if base is None:
        return
    reference_base = _base(name)
    expected = _outputs(_view(name)(reference_base))
    actual = _outputs(_view(name)(base))
    _write((reference_base,))
    _write((base,))
    snippet = _snippet(
        name,
        device,
        then="x.mul_(-2).add_(0.5)\n" + PRINT_VIEWS,
    )
    for view, reference_view in zip(actual, expected, strict=True):
        assert_matches_reference(
            view,
            reference_view,
            what=f"{VIEW_OPS[name][2]} after writing the base",
            snippet=snippet,
        )


@st.composite
def as_strided_geometry(draw: st.DrawFn) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    """(storage numel, sizes, strides, offset) that stay inside the storage; strides may be 0
    or overlap, as as_strided allows."""
    ndim = draw(st.integers(0, 3))
    sizes = tuple(draw(st.integers(0, 4)) for _ in range(ndim))
    strides = tuple(draw(st.integers(0, 6)) for _ in range(ndim))
    offset = draw(st.integers(0, 5))
    extent = 0 if 0 in sizes else sum((s - 1) * t for s, t in zip(sizes, strides, strict=True))
    numel = offset + extent + 1 + draw(st.integers(0, 3))
    return numel, sizes, strides, offset


@given(data=st.data())
def test_as_strided_matches_reference(backend, device, data):
    """Hypothesis-drawn valid sizes, strides and storage offsets read the same elements as on
    the reference, and alias the base's storage."""
    numel, sizes, strides, offset = data.draw(as_strided_geometry(), label="geometry")
    spec = data.draw(tensor_specs(backend.capabilities.dtypes, shape=(numel,)), label="base")
    reference_base = spec.make()
    base = reference_base.to(device, copy=True)
    actual = base.as_strided(sizes, strides, offset)
    expected = reference_base.as_strided(sizes, strides, offset)
    snippet = MAKE_SNIPPET + (
        f"x = {spec.code}\nexpected = x.as_strided({sizes}, {strides}, {offset})\n"
        f"actual = x.to('{device}').as_strided({sizes}, {strides}, {offset})\n"
        "print(expected, actual.cpu())"
    )
    assert actual.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert (actual.stride(), actual.storage_offset()) == (strides, offset)
    assert_matches_reference(actual, expected, what="as_strided", snippet=snippet, tolerance=(0, 0))


def test_as_strided_offset_counts_from_the_storage_start(device):
    """as_strided's storage_offset is absolute in the storage, not relative to a view's offset."""
    base = torch.arange(12.0).to(device, copy=True)
    view = base[5:]
    strided = view.as_strided((2, 2), (3, 1), 1)
    assert strided.storage_offset() == 1
    assert strided.cpu().tolist() == [[1.0, 2.0], [4.0, 5.0]]


# name: (the in-place operation as code on a view ``v``, the dtypes it applies to)
IN_PLACE_OPS = {
    "add_scalar": ("v.add_(3)", "any"),
    "mul_tensor": ("v.mul_(torch.ones_like(v) * 2)", "any"),
    "clamp_": ("v.clamp_(-5, 5)", "real"),
    "fill_": ("v.fill_(7)", "any"),
    "zero_": ("v.zero_()", "any"),
    "copy_": ("v.copy_(torch.arange(v.numel()).reshape(v.shape).to(v.dtype))", "any"),
    "masked_fill_": ("v.masked_fill_(v > 0, -1)", "real"),
    "exp_": ("v.exp_()", "float"),
    "addcmul_": ("v.addcmul_(v, v, value=0.5)", "float"),
    "neg_": ("v.neg_()", "signed"),
}


def _applies(kind: str, dtype: torch.dtype) -> bool:
    if kind == "float":
        return dtype.is_floating_point
    if kind == "real":
        return not dtype.is_complex and dtype != torch.bool
    if kind == "signed":
        return dtype not in (torch.bool, torch.uint8)
    return dtype != torch.bool


@pytest.mark.parametrize("op", sorted(IN_PLACE_OPS))
def test_in_place_op_on_a_non_contiguous_view_matches_reference(backend, device, op):
    """Hypothesis-drawn views of a (5, 6) base taken on the device (slices with steps,
    transposes, expands, storage offsets) with drawn values (ties, extremal floats, integers
    at their limits): an in-place operator changes exactly the view's elements, as on the
    reference, or is refused as there (a write to an expanded view)."""
    code, kind = IN_PLACE_OPS[op]
    among = [d for d in backend.capabilities.dtypes if _applies(kind, d)]
    among = [d for d in (torch.float32, torch.bfloat16, torch.int32, torch.int64) if d in among]

    # @given inside the parametrized test: the plugin applies the profile to each collected
    # @given function once, and a parametrized one is collected once per parameter.
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        spec = data.draw(tensor_specs(backend.capabilities.dtypes, (5, 6), among), label="base")
        values = data.draw(st.sampled_from(value_kinds(spec.dtype)), label="values")
        spec = dataclasses.replace(spec, values=values)
        view_code = data.draw(device_views((5, 6), min_steps=1), label="view")
        reference_base = spec.make()
        base = reference_base.to(device, copy=True)
        run = eval(f"lambda v: {code}")
        snippet = MAKE_SNIPPET + (
            f"x = {spec.code}\ny = x.to('{device}')\n"
            f"t = x\nv = {view_code}\n{code}\nt = y\nv = {view_code}\n{code}\nprint(x, y.cpu())"
        )
        try:
            run(apply_view(view_code, reference_base))
        except RuntimeError as error:
            with pytest.raises(type(error)):
                run(apply_view(view_code, base))
            return
        view = apply_view(view_code, base)
        run(view)
        assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
        assert_matches_reference(
            base, reference_base, what=f"the base after {code}", snippet=snippet
        )

    check()


@pytest.mark.parametrize(
    "code", ["x.t()", "x[:, ::2]", "x.expand(3, 4, 6)", "x.unfold(1, 2, 1)", "x[1:, 2:]"]
)
def test_contiguous_of_a_non_contiguous_view_is_a_copy(device, code):
    """contiguous() of a non-contiguous view is a new contiguous tensor with the same values,
    which no longer aliases the base; contiguous() of a contiguous tensor returns it unchanged."""
    reference_base = torch.arange(24.0).reshape(4, 6)
    base = reference_base.to(device, copy=True)
    assert base.contiguous() is base
    view = eval(f"lambda x: {code}")(base)
    expected = eval(f"lambda x: {code}")(reference_base).contiguous()
    assert not view.is_contiguous()
    copy = view.contiguous()
    assert copy.is_contiguous() and copy._base is None
    assert copy.untyped_storage().data_ptr() != base.untyped_storage().data_ptr(), (
        f"{code}.contiguous() still shares the base's storage"
    )
    assert_on_device(copy, device)
    assert_matches_reference(copy, expected, what=f"{code}.contiguous()", tolerance=(0, 0))
    copy.fill_(-1)
    assert torch.equal(base.cpu(), reference_base), f"writing {code}.contiguous() changed the base"


@pytest.mark.parametrize(
    "code", ["x.reshape(6, 4)", "x.t().reshape(24)", "x[:, ::2].reshape(-1)", "x.t().reshape(6, 4)"]
)
def test_reshape_is_a_view_exactly_when_the_reference_s_is(device, code):
    """reshape returns a view when the strides allow one and a copy otherwise, as on the
    reference (the same memory layout gives the same answer on every device)."""
    reference_base = torch.arange(24.0).reshape(4, 6)
    base = reference_base.to(device, copy=True)
    expected = eval(f"lambda x: {code}")(reference_base)
    actual = eval(f"lambda x: {code}")(base)
    reference_aliases = expected.untyped_storage().data_ptr() == (
        reference_base.untyped_storage().data_ptr()
    )
    aliases = actual.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert aliases == reference_aliases, (
        f"{code} {'aliases' if aliases else 'copies'} on {device}, the reference "
        f"{'aliases' if reference_aliases else 'copies'}"
    )
    assert_matches_reference(actual, expected, what=code, tolerance=(0, 0))


def test_view_of_a_view_has_the_root_as_its_base(device):
    base = torch.arange(24.0).reshape(4, 6).to(device, copy=True)
    view = base.t()[1:].unsqueeze(0)
    assert view._base is base
    view[0, 0, 0] = -1.0
    assert base[0, 1].item() == -1.0


def test_view_with_incompatible_strides_is_refused(device):
    """view() never copies: on a transposed tensor it raises, as on the reference."""
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.arange(24.0).reshape(4, 6).to(device).t().view(-1)


def test_conjugate_view_materializes_like_the_reference(backend, device, request):
    """conj() of a complex tensor is a lazy view (is_conj, same storage); resolving it, copying
    it to the CPU and reading it give the reference's values; view_as_real refuses it."""
    if run_known_failure_in_child(request):
        return
    reference = torch.tensor([1 + 2j, -3.5 - 1j, 0.25j], dtype=torch.complex64)
    if not backend.capabilities.supports(torch.complex64):
        with pytest.raises(TypeError):
            reference.to(device)
        return
    x = reference.to(device)
    lazy = x.conj()
    assert lazy.is_conj() and lazy.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    snippet = (
        f"x = torch.tensor([1 + 2j, -3.5 - 1j, 0.25j], device='{device}')\n"
        "print(x.conj().cpu(), x.conj().resolve_conj().cpu())"
    )
    assert_matches_reference(lazy.cpu(), reference.conj(), what="x.conj().cpu()", snippet=snippet)
    resolved = lazy.resolve_conj()
    assert not resolved.is_conj()
    assert_on_device(resolved, device)
    assert_matches_reference(
        resolved, reference.conj().resolve_conj(), what="resolve_conj()", snippet=snippet
    )
    assert_matches_reference(lazy * 1, reference.conj() * 1, what="x.conj() * 1", snippet=snippet)
    with pytest.raises(RuntimeError):
        torch.view_as_real(lazy)
