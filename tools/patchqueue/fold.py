"""Fold a patch's standalone test file into the upstream suite it belongs to.

The series keeps each patch's test as a new file under ``test/``: that is what can be applied and
run everywhere the series is used (an overlay of an installed torch has no ``test/`` tree, and the
upstream test files at the base commit are not available to every user of the queue). Upstream,
however, wants tests added to the existing suite (``test/test_dlpack.py``,
``test/profiler/test_profiler.py``, ...), where ``run_test.py`` and the file's owners find them.
So a patch names its suite in a trailer::

    Upstream-Test: test/test_dlpack.py

(or ``NEW -> SUITE`` pairs, comma separated, when it adds several files) and ``export`` folds the
new file into that suite in the PR's commit: its imports are merged into the suite's (only the
names the suite does not bind yet), its classes and ``instantiate_*`` calls go before the suite's
``if __name__ == "__main__":`` block, its module docstring and ``# Owner(s)`` line are dropped
(the suite has its own; the commit message keeps the explanation), and so is a top-level
statement the suite already has word for word (a guard such as ``if not dist.is_available():``).
Nothing here runs git.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass

from tools.patchqueue.errors import BadInput

# PyTorch's ruff line-length: an import line fold writes must not need reformatting.
_LINE_LENGTH = 88
_PAIR_RE = re.compile(r"^\s*(?:(\S+)\s*->\s*)?(\S+)\s*$")


@dataclass(frozen=True)
class Fold:
    """One added test file and the upstream suite it is folded into."""

    new: str
    suite: str


def folds(trailer: str, added_tests: list[str]) -> list[Fold]:
    """Parse an ``Upstream-Test:`` value against the test files the patch adds.

    ``SUITE`` alone names the suite of the patch's only added test file. Raises BadInput when a
    pair names a file the patch does not add, or a bare suite is given for several files.
    """
    result = []
    for part in filter(str.strip, trailer.split(",")):
        match = _PAIR_RE.match(part)
        if match is None:
            raise BadInput(f"Upstream-Test: {part!r}: expected 'SUITE' or 'NEW -> SUITE'")
        new, suite = match.groups()
        if new is None:
            if len(added_tests) != 1:
                raise BadInput(
                    f"Upstream-Test: {suite}: the patch adds {len(added_tests)} test files; "
                    "name each as 'NEW -> SUITE'"
                )
            new = added_tests[0]
        if new not in added_tests:
            raise BadInput(f"Upstream-Test: {new} is not a test file the patch adds")
        result.append(Fold(new, suite))
    return result


def _bound(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(bound-as, dotted object) of each name an import binds.

    ``import a.b`` binds ``a`` to the package ``a``; ``import a.b as c`` and
    ``from a import b as c`` both bind ``c`` to ``a.b``.
    """
    if isinstance(node, ast.Import):
        return [
            (a.asname, a.name) if a.asname else (a.name.split(".")[0], a.name.split(".")[0])
            for a in node.names
        ]
    module = "." * node.level + (node.module or "")
    return [(a.asname or a.name, f"{module}.{a.name}") for a in node.names]


def _bindings(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """What each top-level import of the suite binds (name -> dotted object), and the
    modules its plain ``import`` statements load."""
    bound: dict[str, str] = {}
    loaded: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound.update(_bound(node))
        if isinstance(node, ast.Import):
            loaded |= {a.name for a in node.names}
    return bound, loaded


def _names(tree: ast.Module) -> set[str]:
    """Every name the module binds at top level (classes, functions, assignments, imports)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
    return names


def _from_import(module: str, aliases: list[ast.alias], exploded: bool = False) -> str:
    """``from MODULE import ...`` as ruff format writes it: on one line when it fits in
    PyTorch's line length (and was not ``exploded`` with a magic trailing comma), else one name
    a line in parentheses."""
    names = [a.name + (f" as {a.asname}" if a.asname else "") for a in aliases]
    line = f"from {module} import {', '.join(names)}\n"
    if len(line) - 1 <= _LINE_LENGTH and not exploded:
        return line
    return f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"


def _usort_key(alias: ast.alias) -> str:
    # usort (PyTorch's import sorter) orders the names of one import case-insensitively.
    return alias.name.casefold()


# usort's categories, in its order, with PyTorch's [tool.usort.known] (pyproject.toml).
_FIRST_PARTY = frozenset({"caffe2", "torch", "torchgen", "functorch", "test"})
_STDLIB = frozenset(sys.stdlib_module_names) | {"typing_extensions"}


def _category(module: str) -> int:
    """usort's category of an imported module: 0 future, 1 standard library, 2 third party,
    3 first party (relative imports too)."""
    top = module.split(".")[0]
    if module.startswith(".") or top in _FIRST_PARTY:
        return 3
    if top == "__future__":
        return 0
    return 1 if top in _STDLIB else 2


def _import_module(node: ast.Import | ast.ImportFrom) -> str:
    if isinstance(node, ast.Import):
        return node.names[0].name
    return "." * node.level + (node.module or "")


def _sort_key(module: str, is_from: bool) -> tuple[int, bool, str]:
    """usort's order: by category, then every ``import x`` before every ``from x import``,
    then by module name, case-insensitively."""
    return _category(module), is_from, module.casefold()


def _node_key(node: ast.Import | ast.ImportFrom) -> tuple[int, bool, str]:
    return _sort_key(_import_module(node), isinstance(node, ast.ImportFrom))


def _insertion_point(
    header: list[ast.stmt], suite_lines: list[str], key: tuple[int, bool, str]
) -> tuple[int, str, str]:
    """Where usort puts a new import (its :func:`_sort_key`) in the suite's header: (0-based
    line index to insert before, text before it, text after it); the text is a blank line when
    the import starts or ends a category block of its own."""
    imports = [n for n in header if isinstance(n, ast.Import | ast.ImportFrom)]
    same = [n for n in imports if _node_key(n)[0] == key[0]]

    def start(node: ast.stmt) -> int:  # the comments right above an import belong to it
        first = node.lineno - 1
        while first > 0 and suite_lines[first - 1].lstrip().startswith("#"):
            first -= 1
        return first

    if same:
        later = [n for n in same if _node_key(n) > key]
        if later:
            return start(later[0]), "", ""
        return same[-1].end_lineno or same[-1].lineno, "", ""
    greater = [n for n in imports if _node_key(n)[0] > key[0]]
    if greater:
        return start(greater[0]), "", "\n"
    if imports:
        return imports[-1].end_lineno or imports[-1].lineno, "\n", ""
    return 0, "", ""


def _own_from_import(
    suite_tree: ast.Module, suite_lines: list[str], module: str
) -> ast.ImportFrom | None:
    """The suite's first ``from MODULE import ...`` of its header (see ``_header_end``) that
    holds no comment (rewriting it would drop the comment), which new names of MODULE join; None
    when there is none."""
    for node in suite_tree.body[: _header_end(suite_tree)]:
        if isinstance(node, ast.ImportFrom) and "." * node.level + (node.module or "") == module:
            if "#" not in "".join(suite_lines[node.lineno - 1 : node.end_lineno]):
                return node
    return None


def _header_end(tree: ast.Module) -> int:
    """The index in ``tree.body`` after the suite's last import above its first class or
    function: new imports go there, with the suite's own, not after an import the suite makes
    further down (test_utils.py imports get_pretty_env_info between two test classes)."""
    first_def = next(
        (i for i, n in enumerate(tree.body)
         if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)),
        len(tree.body),
    )  # fmt: skip
    imports = [
        i for i, n in enumerate(tree.body[:first_def]) if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    return imports[-1] + 1 if imports else 0


def _merged(node: ast.ImportFrom, wanted: list[ast.alias]) -> str:
    """``node`` rewritten with ``wanted`` added: in usort's order when its names are in it (as
    PyTorch's are), else at the end; exploded over lines when it was."""
    names = list(node.names)
    in_order = names == sorted(names, key=_usort_key)
    names = sorted(names + wanted, key=_usort_key) if in_order else names + wanted
    module = "." * node.level + (node.module or "")
    return _from_import(module, names, exploded=node.end_lineno != node.lineno)


def _is_main_block(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def _segment(lines: list[str], node: ast.stmt) -> str:
    """The source lines of ``node``, its decorators and the comments right above them."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return "".join(lines[first : node.end_lineno])


def fold_test(new_source: str, suite_source: str, new_path: str, suite_path: str) -> str:
    """The suite's source with the new test file folded in (see the module docstring).

    Raises BadInput when either does not parse, the suite has no ``if __name__ == "__main__":``
    block, or the new file defines a name the suite already binds differently.
    """
    try:
        new_tree = ast.parse(new_source, new_path)
        suite_tree = ast.parse(suite_source, suite_path)
    except SyntaxError as exc:
        raise BadInput(f"{exc.filename}: does not parse: {exc.msg} (line {exc.lineno})") from exc
    mains = [n for n in suite_tree.body if _is_main_block(n)]
    if not mains:
        raise BadInput(f'{suite_path}: no `if __name__ == "__main__":` block to fold before')
    new_lines = new_source.splitlines(keepends=True)
    suite_lines = suite_source.splitlines(keepends=True)
    bound, loaded = _bindings(suite_tree)
    suite_names = _names(suite_tree)
    present = {ast.dump(n) for n in suite_tree.body}
    pending: list[tuple[ast.Import | ast.ImportFrom, list[ast.alias]]] = []
    kept: list[ast.stmt] = []
    body: list[str] = []
    for index, node in enumerate(new_tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the module docstring: the commit message carries the explanation
        if _is_main_block(node):
            continue
        if isinstance(node, ast.Import):
            # ``import a.b`` is there when the suite loads ``a.b`` itself; an aliased one
            # when the suite binds its name to the same module, in either import form.
            missing = [
                a for a, (name, target) in zip(node.names, _bound(node), strict=True)
                if (a.name not in loaded if a.asname is None else bound.get(name) != target)
            ]  # fmt: skip
            pending.append((node, missing))
            continue
        if isinstance(node, ast.ImportFrom):
            missing = [
                a for a, (name, target) in zip(node.names, _bound(node), strict=True)
                if bound.get(name) != target
            ]  # fmt: skip
            pending.append((node, missing))
            continue
        if ast.dump(node) in present:
            continue  # a statement the suite has already (e.g. its distributed-available guard)
        present.add(ast.dump(node))
        defined = _names(ast.Module(body=[node], type_ignores=[]))
        clash = sorted(defined & suite_names)
        if clash:
            raise BadInput(
                f"{new_path}: defines {', '.join(clash)}, which {suite_path} already has; "
                "rename it before folding"
            )
        body.append(_segment(new_lines, node))
        kept.append(node)
    # Only what the folded code uses: an import the new file needed for its own __main__ block
    # (run_tests) or for its docstring's sake would be unused in the suite (F401).
    used = {
        n.id for n in ast.walk(ast.Module(body=kept, type_ignores=[])) if isinstance(n, ast.Name)
    }
    imports: list[tuple[tuple[int, bool, str], str]] = []  # (sort key, line) of each new one
    merged: dict[int, tuple[ast.ImportFrom, list[ast.alias]]] = {}  # suite line -> its names
    rebinding: list[str] = []  # an added import of a name the suite binds otherwise
    for node, missing in pending:
        wanted = [a for a in missing if (a.asname or a.name.split(".")[0]) in used]
        if not wanted:
            continue
        # Checked here, before a name joins the suite's own ``from X import``: that line binds
        # it above the suite's own definition (``profile = functools.partial(...)``), which
        # would rebind it for the folded code as well (F811).
        module = "." * node.level + (node.module or "") if isinstance(node, ast.ImportFrom) else ""
        rebinding += [
            _from_import(module, [a]).strip() if module else
            f"import {a.name}" + (f" as {a.asname}" if a.asname else "")
            for a, (name, target) in zip(node.names, _bound(node), strict=True)
            if a in wanted and name in suite_names and bound.get(name) != target
        ]  # fmt: skip
        if isinstance(node, ast.Import):
            imports += [
                (
                    _sort_key(a.name, False),
                    f"import {a.name}" + (f" as {a.asname}" if a.asname else "") + "\n",
                )
                for a in wanted
            ]
            continue
        own = _own_from_import(suite_tree, suite_lines, module)
        if own is None:
            imports.append((_sort_key(module, True), _from_import(module, wanted)))
        else:  # added to the suite's own import of that module, as a person would
            merged.setdefault(own.lineno, (own, []))[1].extend(wanted)
    if rebinding:
        raise BadInput(
            f"{new_path}: its import {rebinding[0]!r} would rebind a name {suite_path} "
            "already uses; import it under another name"
        )
    header = suite_tree.body[: _header_end(suite_tree)]
    import_end = header[-1].end_lineno or header[-1].lineno if header else 0
    main_start = mains[-1].lineno - 1
    while main_start > 0 and suite_lines[main_start - 1].lstrip().startswith("#"):
        main_start -= 1
    head = list(suite_lines[:import_end])
    # Each new import where usort puts it (its category block, in module order), so that the
    # folded suite passes PYFMT; the suite's own imports, merged, stay where they are.
    inserts: dict[int, list[tuple[tuple[int, bool, str], str, str, str]]] = {}
    for key, line in imports:
        at, above, below = _insertion_point(header, suite_lines, key)
        inserts.setdefault(at, []).append((key, line, above, below))
    edits: list[tuple[int, int, list[str]]] = []  # (position, 1 replace / 0 insert, lines)
    for lineno, (node, wanted) in merged.items():
        edits.append((lineno - 1, 1, [_merged(node, wanted)]))
    for at, group in inserts.items():
        group.sort()
        text = group[0][2] + "".join(line for _, line, _, _ in group) + group[0][3]
        edits.append((at, 0, [text]))
    for at, kind, lines in sorted(edits, reverse=True):  # bottom up: earlier lines stay put
        if kind:
            node = merged[at + 1][0]
            head[at : node.end_lineno] = lines
        else:
            head[at:at] = lines
    before_main = suite_lines[import_end:main_start]
    while before_main and not before_main[-1].strip():
        before_main.pop()
    folded = (
        head
        + before_main
        + ["\n\n"]
        + ["\n\n\n".join(segment.rstrip("\n") for segment in body) + "\n"]
        + ["\n\n"]
        + suite_lines[main_start:]
    )
    return "".join(folded)
