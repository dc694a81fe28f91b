"""DA102-DA104: tensors and modules sent to CUDA by name."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import (
    ACCELERATOR_TYPE,
    REVIEW,
    SAFE,
    Context,
    Finding,
    Rule,
    generic_device,
    is_cuda_literal,
)


class DotCudaCall(Rule):
    """``.cuda()`` on a tensor or module.

    Before::

        model = model.cuda()

    After::

        model = model.to(torch.accelerator.current_accelerator())
    """

    id = "DA102"
    name = "dot-cuda-call"
    summary = "`.cuda()` moves to CUDA only"
    why = (
        "`.cuda()` fails on every machine without CUDA, even one with another accelerator. "
        "`.to(torch.accelerator.current_accelerator())` moves to the current device of whichever "
        "accelerator is present (the current CUDA device on CUDA, as `.cuda()` does)."
    )
    fix_safety = SAFE
    node_types = (ast.Call,)

    def visit(self, node: ast.Call, ctx: Context) -> Iterator[Finding]:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr != "cuda":
            return
        if ctx.qualname(func) == "torch.cuda":  # a module, not a method
            return
        safety = SAFE if not node.args and not node.keywords else REVIEW
        receiver = ast.unparse(func.value)
        message = "`.cuda()` works on CUDA only; use `.to(<accelerator>)`"
        target = "torch.accelerator.current_accelerator()"
        if node.args:
            # By the argument's kind, so that the rewrite is `.cuda(arg)` on CUDA: an index
            # literal becomes the accelerator's device with that index; anything else (a
            # torch.device, a string, an index in a variable) is what `.to()` takes as it is
            # (`torch.device(type, <a torch.device>)` would raise a TypeError on CUDA itself).
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and type(arg.value) is int:
                target = f"torch.device({ACCELERATOR_TYPE}, {arg.value})"
            else:
                target = ast.unparse(arg)
                message += (
                    " (review: `.to(arg)` is `.cuda(arg)` on CUDA for an index, a device or a "
                    "string; a None, which `.cuda()` reads as the current device, leaves it "
                    "where it is)"
                )
        args = [target, *(ast.unparse(kw) for kw in node.keywords)]
        replacement = f"{receiver}.to({', '.join(args)})"
        yield ctx.finding(self, node, message, replacement, safety)


class CudaDeviceLiteral(Rule):
    """A "cuda" / "cuda:N" device in ``device=``, ``map_location=``, ``device_type=``,
    ``.to(...)``, ``torch.device(...)``, ``autocast(...)`` or an argparse ``--device`` default.

    Also flagged: f-strings and ``.format`` calls that start with "cuda:" (``f"cuda:{rank}"``),
    a "cuda" branch of a conditional, a "cuda" assigned to a variable or attribute named like a
    device (or of any name the function then uses as a device: ``arg = "cuda:0"`` ...
    ``torch.device(arg)``), one returned by a function named like one, and
    ``device_map="cuda"`` (review next to ``attn_implementation="flash_attention_2"``, which is
    CUDA-only). Lightning's ``accelerator="cuda"`` becomes ``"auto"`` (review: Lightning knows
    its own accelerators, not every device type). The replacement is a ``str`` as the
    literal is, equal to it on CUDA and on a machine without an accelerator, so every one of
    these rewrites is safe. The common switch ``"cuda" if torch.cuda.is_available() else "cpu"``
    is rewritten whole.

    Before::

        x = torch.zeros(3, device="cuda")
        y = x.to(f"cuda:{rank}")
        device = "cuda" if torch.cuda.is_available() else "cpu"

    After::

        x = torch.zeros(3, device=getattr(torch.accelerator.current_accelerator(), "type", "cuda"))
        y = x.to(getattr(torch.accelerator.current_accelerator(), "type", "cuda") + f":{rank}")
        device = getattr(
            torch.accelerator.current_accelerator(check_available=True), "type", "cpu"
        )
    """

    id = "DA103"
    name = "cuda-device-literal"
    summary = 'hard-coded "cuda" device'
    why = (
        'A "cuda" string pins the code to NVIDIA (and ROCm) GPUs. The current accelerator is '
        "the same device on CUDA and the right one everywhere else."
    )
    fix_safety = SAFE
    node_types = (ast.Call, ast.Assign, ast.AnnAssign, ast.Return, ast.Dict, ast.IfExp)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.IfExp):
            # The switch wherever it stands (``run(model, "cuda" if ... else "cpu")``): it can
            # only be a device. Places seen first (a ``device=``) have claimed it already.
            switch = switch_finding(self, node, ctx)
            if switch is not None:
                yield switch
            return
        if isinstance(node, ast.Dict):  # a config: {"device": "cuda"}
            values = [
                v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and "device" in str(k.value).lower()
            ]
            yield from self._report(values, ctx, SAFE)
            return
        if isinstance(node, ast.Call):
            yield from self._lightning_accelerator(node, ctx)
            yield from self._report(self._amp_devices(node, ctx), ctx, REVIEW)
            # Passed straight to a device parameter: the generic device means the same on CUDA.
            yield from self._report(self._call_devices(node, ctx), ctx, SAFE)
        elif not isinstance(node.value, ast.Constant | ast.IfExp | ast.JoinedStr | ast.Call):
            return  # the common case, decided before looking at names or enclosing functions
        elif isinstance(node, ast.Return):
            # ``def get_device(): return "cuda"``: the caller may treat the result as a string.
            if node.value is not None and _in_device_function(node, ctx):
                yield from self._report([node.value], ctx, SAFE)
        else:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(
                _names_a_device(t) or _used_as_device(t, node, ctx) for t in targets
            ):
                yield from self._report([node.value], ctx, SAFE)

    def _lightning_accelerator(self, node: ast.Call, ctx: Context) -> Iterator[Finding]:
        """``Fabric(accelerator="cuda")`` / ``Trainer(accelerator="cuda")``: Lightning knows the
        accelerators it ships, not the device type of any backend, so the generic device would
        not do; "auto" picks CUDA where it is and runs elsewhere (review: a run that failed
        without CUDA now runs, on the CPU or another accelerator Lightning supports)."""
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "accelerator" and is_cuda_literal(value) and value.value == "cuda":
                ctx.claimed.add(id(value))
                yield ctx.finding(
                    self,
                    value,
                    'accelerator="cuda" runs on CUDA only; "auto" picks it where it is',
                    '"auto"',
                    REVIEW,
                )

    @staticmethod
    def _call_devices(node: ast.Call, ctx: Context) -> list[ast.expr]:
        values = [kw.value for kw in node.keywords if kw.arg in _DEVICE_KEYWORDS]
        # transformers / accelerate: from_pretrained(..., device_map="cuda")
        values += [
            kw.value
            for kw in node.keywords
            if kw.arg == "device_map" and not _asks_for_flash_attention(node)
        ]
        func = node.func
        name = ctx.qualname(func)
        if node.args and (
            (isinstance(func, ast.Attribute) and func.attr == "to") or name == "torch.device"
        ):
            values.append(node.args[0])
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "add_argument"
            and any(
                isinstance(a, ast.Constant) and "device" in str(a.value).lower() for a in node.args
            )
        ):  # argparse: parser.add_argument("--device", default="cuda")
            values += [kw.value for kw in node.keywords if kw.arg == "default"]
        return values

    def _amp_devices(self, node: ast.Call, ctx: Context) -> list[ast.expr]:
        if any(kw.arg == "device_map" for kw in node.keywords) and _asks_for_flash_attention(node):
            # FlashAttention 2 is CUDA-only: the device can change only with the attention
            return [kw.value for kw in node.keywords if kw.arg == "device_map"]
        """Device types that switch mixed precision on (``autocast(device_type="cuda")``,
        ``GradScaler("cuda")``): on another accelerator the rewrite turns AMP on, which changes
        the numbers (review)."""
        values = [kw.value for kw in node.keywords if kw.arg == "device_type"]
        if node.args and ctx.qualname(node.func) in _AMP_CALLS:
            values.append(node.args[0])
        return values

    def _report(self, values: list[ast.expr], ctx: Context, safety: str) -> Iterator[Finding]:
        for value in values:
            switch = switch_finding(self, value, ctx)
            if switch is not None:
                yield switch
                continue
            for literal in _device_literals(value):
                if id(literal) in ctx.claimed:
                    continue
                ctx.claimed.add(id(literal))
                text, replacement = _generic(literal)
                nested = not isinstance(literal, ast.Constant) and any(
                    (ctx.qualname(n) or "").startswith("torch.cuda.")
                    for n in ast.walk(literal)
                    if isinstance(n, ast.Attribute)
                )
                yield ctx.finding(
                    self,
                    literal,
                    f'device "{text}" is CUDA-only; use the current accelerator',
                    replacement,
                    # f"cuda:{torch.cuda.current_device()}": the inner call has its own fix,
                    # and two rewrites of one span cannot both apply
                    REVIEW if nested else safety,
                )


def switch_finding(rule: Rule, value: ast.expr, ctx: Context) -> Finding | None:
    """The finding for ``"cuda" if torch.cuda.is_available() else "cpu"`` (``value``), which is
    rewritten whole, its guard and literal claimed together: the device switch of most CUDA-first
    code, the same str on CUDA and without an accelerator, the current accelerator's type
    elsewhere. None for any other expression (or one already reported)."""
    switch = _cuda_else_cpu(value, ctx)
    if switch is None or id(value) in ctx.claimed:
        return None
    guard = value.test if isinstance(value.test, ast.Call) else value.test.operand
    literals = [id(literal) for literal in _device_literals(value)]
    ctx.claimed.update([id(value), id(guard), id(guard.func), *literals])
    return ctx.finding(
        rule,
        value,
        'device "cuda" if CUDA is available, else "cpu": use the current accelerator, or "cpu"',
        _switch_replacement(switch),
        SAFE,
    )


CUDA_ELSE_CPU = (
    'getattr(torch.accelerator.current_accelerator(check_available=True), "type", "cpu")'
)


def _cuda_else_cpu(value: ast.expr, ctx: Context) -> ast.expr | None:
    """The CUDA device of ``<cuda device> if torch.cuda.is_available() else "cpu"`` (or the
    negated spelling), None for any other expression."""
    if not isinstance(value, ast.IfExp):
        return None
    test, body, orelse = value.test, value.body, value.orelse
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, body, orelse = test.operand, orelse, body
    if (
        isinstance(test, ast.Call)
        and not test.args
        and not test.keywords
        and ctx.qualname(test.func) == "torch.cuda.is_available"
        and (is_cuda_literal(body) or _formatted_cuda(body))
        and isinstance(orelse, ast.Constant)
        and orelse.value == "cpu"
    ):
        return body
    return None


def _switch_replacement(body: ast.expr) -> str:
    if isinstance(body, ast.Constant) and body.value == "cuda":
        return CUDA_ELSE_CPU
    return f'{_generic(body)[1]} if torch.accelerator.is_available() else "cpu"'


# Keywords that take a device: ``device=``, ``torch.load(map_location=)``,
# ``autocast(device_type=)``.
_DEVICE_KEYWORDS = ("device", "map_location")
_AMP_CALLS = ("torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler")


def _formatted_cuda(value: ast.expr) -> bool:
    """``f"cuda:{rank}"`` or ``"cuda:{}".format(rank)``."""
    if isinstance(value, ast.JoinedStr):
        head = value.values[0] if value.values else None
        return isinstance(head, ast.Constant) and str(head.value).startswith("cuda:")
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "format"
        and isinstance(value.func.value, ast.Constant)
        and str(value.func.value.value).startswith("cuda:")
    )


def _generic(node: ast.expr) -> tuple[str, str]:
    """What the device expression reads as, and its generic replacement (a ``str``, too)."""
    if isinstance(node, ast.Constant):
        return node.value, generic_device(node.value)
    text = ast.unparse(node)
    if isinstance(node, ast.JoinedStr):
        rest = ast.JoinedStr([ast.Constant(node.values[0].value[len("cuda") :]), *node.values[1:]])
        return text, f"{ACCELERATOR_TYPE} + {ast.unparse(rest)}"
    template = node.func.value.value[len("cuda") :]  # "cuda:{}".format(i)
    call = ast.Call(
        ast.Attribute(ast.Constant(template), "format", ast.Load()), node.args, node.keywords
    )
    return text, f"{ACCELERATOR_TYPE} + {ast.unparse(call)}"


def _device_literals(value: ast.expr) -> Iterator[ast.expr]:
    """The "cuda" device expressions that ``value`` can evaluate to: a literal, an f-string or
    ``.format`` starting with "cuda:", or a branch of a conditional
    (``"cuda" if torch.cuda.is_available() else "cpu"``), however deeply nested."""
    if isinstance(value, ast.IfExp):
        yield from _device_literals(value.body)
        yield from _device_literals(value.orelse)
    elif is_cuda_literal(value) or _formatted_cuda(value):
        yield value


def _names_a_device(target: ast.expr) -> bool:
    """``device = ...``, ``self.device = ...``, ``train_device = ...``: names that hold one."""
    if isinstance(target, ast.Name):
        return any(word in target.id.lower() for word in ("device", "map_location"))
    if isinstance(target, ast.Attribute):
        return any(word in target.attr.lower() for word in ("device", "map_location"))
    return False


def _asks_for_flash_attention(node: ast.Call) -> bool:
    return any(
        kw.arg == "attn_implementation"
        and isinstance(kw.value, ast.Constant)
        and "flash_attention" in str(kw.value.value)
        for kw in node.keywords
    )


def _used_as_device(target: ast.expr, node: ast.stmt, ctx: Context) -> bool:
    """``arg = "cuda:0"`` where ``arg`` is later a device in the same function (or module):
    ``torch.device(arg)``, ``device=arg``, ``.to(arg)``, ``map_location=arg`` (yolov5's
    select_device). Looked up only for a "cuda" value, once per scope."""
    if not isinstance(target, ast.Name) or not _device_literals_of(node.value):
        return False
    scope = ctx.enclosing_function(node)
    cache = ctx.__dict__.setdefault("_device_names", {})
    key = id(scope)
    if key not in cache:
        nodes = ast.walk(scope) if scope is not None else ctx._nodes
        names = set()
        for call in nodes:
            if not isinstance(call, ast.Call):
                continue
            values = [kw.value for kw in call.keywords if kw.arg in _DEVICE_KEYWORDS]
            func = call.func
            if call.args and (
                (isinstance(func, ast.Attribute) and func.attr == "to")
                or ctx.qualname(func) == "torch.device"
            ):
                values.append(call.args[0])
            names.update(v.id for v in values if isinstance(v, ast.Name))
        cache[key] = names
    return target.id in cache[key]


def _device_literals_of(value: ast.expr | None) -> bool:
    return value is not None and any(True for _ in _device_literals(value))


def _in_device_function(node: ast.Return, ctx: Context) -> bool:
    function = ctx.enclosing_function(node)
    return function is not None and "device" in function.name.lower()


class CudaDefaultArgument(Rule):
    """A parameter whose default is a "cuda" device, or the switch
    ``"cuda" if torch.cuda.is_available() else "cpu"`` (rewritten whole, as DA103 does).

    The default becomes the current accelerator's device type, a ``str`` as before, evaluated
    once when the function is defined, as the literal was: "cuda" on CUDA and on a machine
    without an accelerator (so nothing changes there), the accelerator's type elsewhere.
    Callers that pass a device are unaffected. (A ``torch.device("cuda")`` default is DA103's:
    its argument is rewritten the same way, so it still builds a device where CUDA is absent.)

    Before::

        def make_buffer(n, device="cuda"): ...

    After::

        def make_buffer(
            n, device=getattr(torch.accelerator.current_accelerator(), "type", "cuda")
        ): ...
    """

    id = "DA104"
    name = "cuda-default-argument"
    summary = 'function parameter defaults to "cuda"'
    why = (
        "Every caller that relies on the default gets CUDA, whatever the machine has. The "
        "current accelerator's type as the default keeps CUDA callers unchanged."
    )
    fix_safety = SAFE
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        defaults = [*node.args.defaults, *node.args.kw_defaults]
        for default in defaults:
            switch = switch_finding(self, default, ctx) if default is not None else None
            if switch is not None:  # CLIP's load(device="cuda" if ... else "cpu")
                yield switch
            elif default is not None and is_cuda_literal(default):
                yield ctx.finding(
                    self,
                    default,
                    f'parameter defaults to "{default.value}"; default to the current '
                    "accelerator's device type",
                    generic_device(default.value),
                )
