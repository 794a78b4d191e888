"""Reading this library's own source: the def, lambda or class behind a live object.

`module_source(name)` parses a module once; `find_code_node` finds the def or lambda whose
code is a function's (compiling the text again and comparing bytecode, names and
constants, so what is found is what runs); `references` lists a node's uses of global
names with their values (following attribute chains on project modules, so
`errors.InvalidArgumentError` is one reference); `apply_edits` and `shift` give the node's
text with those uses replaced and its indentation changed (string literals untouched).
graph/numpy_source/writer.py builds on these to write kernels out as standalone code.
"""
import ast
import builtins
import dis
import functools
import inspect
import io
import symtable
import sys
import tokenize
import types

import numpy as np

from defun.runtime import errors

__all__ = ["PROJECT_PACKAGES", "STDLIB", "is_project", "refuse", "Lookup", "references",
           "global_names", "module_source", "bound_names", "functions_of", "class_body_names",
           "base_spans", "header_lines", "find_code_node", "find_class_node", "apply_edits",
           "shift", "numpy_path", "is_builtin"]


PROJECT_PACKAGES = ("defun",)     # defun.runtime and defun.graph are inside it
# Standard-library modules emitted code may use (the module imports them): part of Python.
STDLIB = ("math", "operator", "string", "sys")


def is_project(module_name):
    """True for a module of this library's packages."""
    return isinstance(module_name, str) and module_name.split(".")[0] in PROJECT_PACKAGES


def refuse(what, where):
    raise errors.UnimplementedError(
        f"numpy source: {where} uses {what}, which has no numpy-only form; the function "
        f"cannot be exported as numpy source (export it as JSON instead)")


class Lookup:
    """How a function's global names resolve: closure cells, module globals, builtins;
    `mutated`: the names its module changes in place (caches)."""

    def __init__(self, globals_, cells, mutated):
        self.globals, self.cells, self.mutated = globals_, cells, mutated

    def __call__(self, name, where):
        if name in self.cells:
            return self.cells[name]
        if name in self.globals:
            return self.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        refuse(f"the name {name!r}, which is not defined", where)


def references(node, names, lookup, where):
    """(node, name, value) per reference to a global of `names` inside `node`: a Name, or
    the attribute chain reading a project module's attribute (`errors.InvalidArgumentError`,
    `shape_rules.shape_str`) down to the first value that is not a module. numpy and the allowed
    stdlib modules stay modules (`np.add.reduce` is written as it is)."""
    parents = {}
    for p in ast.walk(node):
        for c in ast.iter_child_nodes(p):
            parents[c] = p
    fstring_parts = {id(c) for p in ast.walk(node) if isinstance(p, ast.JoinedStr) for c in ast.walk(p)}
    for n in ast.walk(node):
        if not (isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)):
            continue
        in_fstring = id(n) in fstring_parts
        value, target, name = lookup(n.id, where), n, n.id
        if isinstance(value, types.ModuleType) and not is_project(value.__name__):
            if numpy_path(value) is None and value.__name__ not in STDLIB:
                refuse(f"the module {value.__name__}", where)
            p = parents.get(n)
            if value.__name__ in STDLIB and isinstance(p, ast.Attribute) and p.value is n and \
                    isinstance(getattr(value, p.attr, None), (str, int, float)):
                yield p, p.attr, getattr(value, p.attr), in_fstring   # string.digits: a literal
            else:
                yield n, name, value, in_fstring
            continue
        while isinstance(value, types.ModuleType):
            p = parents.get(target)
            if not (isinstance(p, ast.Attribute) and p.value is target and isinstance(p.ctx, ast.Load)):
                refuse(f"the module {value.__name__} as a value", where)
            if not hasattr(value, p.attr):
                refuse(f"{value.__name__}.{p.attr}, which does not exist", where)
            value, target, name = getattr(value, p.attr), p, p.attr
        yield target, name, value, in_fstring


def global_names(code):
    """Global names `code` and the code nested in it load (LOAD_GLOBAL)."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            names.add(ins.argval)
        elif ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            raise errors.UnimplementedError(
                f"numpy source: {code.co_name} assigns the global {ins.argval!r}")
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= global_names(c)
    return names


class _ModuleSource:
    """A module's source, parsed once: its AST, the defs and lambdas by first line, the
    globals its functions change in place, the names it imports."""

    def __init__(self, module_name):
        try:
            self.src = inspect.getsource(sys.modules[module_name])
        except (OSError, TypeError):
            raise errors.UnimplementedError(
                f"numpy source: the source of module {module_name} is not available (an "
                f"installation without .py files?); kernels are written out from it") from None
        self.lines = self.src.splitlines(keepends=True)
        self.tree = ast.parse(self.src)
        self.by_line = {}
        for n in ast.walk(self.tree):
            if isinstance(n, (ast.FunctionDef, ast.Lambda)):
                first = n.decorator_list[0].lineno if getattr(n, "decorator_list", None) else n.lineno
                self.by_line.setdefault(first, []).append(n)
        self.mutated = _mutated_globals(self.tree)
        table = symtable.symtable(self.src, "<module>", "exec")
        self.imported = tuple(sorted(s.get_name() for s in table.get_symbols() if s.is_imported()))

    def segment(self, node):
        """The source text of `node` (columns are UTF-8 byte offsets, as in the AST)."""
        lines = self.lines[node.lineno - 1:node.end_lineno]
        if len(lines) == 1:
            return _cut(lines[0], node.end_col_offset)[len(_cut(lines[0], node.col_offset)):]
        first = lines[0].encode("utf-8")[node.col_offset:].decode("utf-8")
        return first + "".join(lines[1:-1]) + _cut(lines[-1], node.end_col_offset)


@functools.lru_cache(maxsize=None)
def module_source(module_name):
    """The parsed source of module `module_name`, read once per process."""
    return _ModuleSource(module_name)


_MUTATORS = frozenset(["clear", "update", "setdefault", "pop", "popitem", "append", "extend",
                       "insert", "remove", "add", "discard"])


def _mutated_globals(tree):
    """Names a module's functions change in place: `X[k] = v`, `del X[k]`, `X.clear()`..."""
    out = set()
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda))]
    for n in (m for f in functions for m in ast.walk(f)):   # not the module's own set-up
        if isinstance(n, ast.Subscript) and not isinstance(n.ctx, ast.Load) and isinstance(n.value, ast.Name):
            out.add(n.value.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                n.func.attr in _MUTATORS and isinstance(n.func.value, ast.Name):
            out.add(n.func.value.id)
    return out


def bound_names(node):
    """Names bound anywhere inside `node` (parameters, assignments, loop targets...)."""
    bound = set()
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            bound.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not node:
            bound.add(n.name)
        elif isinstance(n, ast.alias):
            bound.add((n.asname or n.name).split(".")[0])
    return bound


def functions_of(v):
    """The functions a class attribute holds (a method, static/class method, property)."""
    if isinstance(v, types.FunctionType):
        yield v
    elif isinstance(v, (staticmethod, classmethod)):
        yield from functions_of(v.__func__)
    elif isinstance(v, property):
        for f in (v.fget, v.fset, v.fdel):
            if f is not None:
                yield from functions_of(f)


def class_body_names(node):
    """Names the class body itself (outside its methods) loads."""
    names = set()
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in stmt.decorator_list:
                names |= {n.id for n in ast.walk(d) if isinstance(n, ast.Name)}
            continue
        names |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return names - {"property", "staticmethod", "classmethod"} - _assigned_in_body(node)


def _assigned_in_body(node):
    return {t.id for stmt in node.body if isinstance(stmt, ast.Assign)
            for t in stmt.targets if isinstance(t, ast.Name)}


def base_spans(node):
    """(line, col, end line, end col) of the names in a class's bases (written separately)."""
    for b in node.bases:
        for n in ast.walk(b):
            if isinstance(n, (ast.Name, ast.Attribute)):
                yield (n.lineno, n.col_offset, n.end_lineno, n.end_col_offset)


def header_lines(node, where):
    """How many lines the `class X(...):` header of `node` takes."""
    n = node.body[0].lineno - node.lineno
    if n < 1:
        refuse(f"the one-line class {node.name}", where)
    return n


_CODE_NODES = {}    # code object -> its def or lambda node (checked once)


def find_code_node(info, code, fn, where):
    """The def or lambda of `info`'s module whose text compiles to `code` (function `fn`)."""
    node = _CODE_NODES.get(code)
    if node is not None:
        return node
    lam = code.co_name == "<lambda>"
    for n in info.by_line.get(code.co_firstlineno, ()):
        if isinstance(n, ast.Lambda) != lam or (not lam and n.name != code.co_name):
            continue
        text = info.segment(n) if lam else _segment(info.lines, n)
        if _same_code(text, code, lam, n.col_offset, info.imported):
            _CODE_NODES[code] = n
            return n
    raise errors.UnimplementedError(
        f"numpy source: {where}: the source of {fn.__module__}.{fn.__qualname__} does not match "
        f"the code that runs (was its file edited since it was imported?)")


def find_class_node(tree, cls, where):
    """The class statement defining `cls` in its module's `tree` (by qualified name)."""
    path = cls.__qualname__.split(".")
    body = tree.body
    node = None
    for part in path:
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if node is None:
            refuse(f"the class {cls.__qualname__}, whose source was not found", where)
        body = node.body
    return node


def _segment(lines, node):
    """The source of a def (from `def`, without decorators) from its module's `lines`."""
    lines = lines[node.lineno - 1:node.end_lineno]
    lines[-1] = _cut(lines[-1], node.end_col_offset)
    return "".join(lines)


def _cut(line, end_col):
    return line.encode("utf-8")[:end_col].decode("utf-8")


def _same_code(text, code, lam, indent, imported):
    """True if `text` (a def indented by `indent`, or a lambda) compiles to `code`'s
    bytecode, names and constants (inside a function whose locals are `code`'s cells).

    `imported`: the names its module binds by import, declared the same way here (the
    compiler calls methods of imported modules differently)."""
    params = ", ".join(code.co_freevars)
    body = f"    return ({text})" if lam else shift(text, indent, "    ")
    names = sorted(set(imported) - set(code.co_freevars))
    head = f"from _ import {', '.join(names)}\n" if names else ""
    wrapper = f"{head}def __outer__({params}):\n{body}\n"
    try:
        module = compile(wrapper, "<numpy source check>", "exec")
    except SyntaxError:
        return False
    outer = next(c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == "__outer__")
    for c in outer.co_consts:
        if isinstance(c, types.CodeType) and c.co_name == code.co_name:
            return _fingerprint(c) == _fingerprint(code)
    return False


def _fingerprint(code):
    consts = tuple(_fingerprint(c) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
                   for c in code.co_consts)
    return (code.co_code, code.co_names, code.co_varnames, code.co_freevars, consts)


def apply_edits(lines, node, edits):
    """The source of `node` (a def, class or lambda) with `edits` ((span, text)) applied;
    `lines`: its module's source lines."""
    first, last = node.lineno, node.end_lineno
    seg = [ln.encode("utf-8") for ln in lines[first - 1:last]]
    seg[-1] = seg[-1][:node.end_col_offset]
    start_col = node.col_offset if isinstance(node, ast.Lambda) else 0
    for (l0, c0, l1, c1), text in sorted(edits, reverse=True):
        i0, i1 = l0 - first, l1 - first
        head, tail = seg[i0][:c0], seg[i1][c1:]
        seg[i0:i1 + 1] = [head + text.encode("utf-8") + tail]
    seg[0] = seg[0][start_col:] if isinstance(node, ast.Lambda) else seg[0]
    return b"".join(seg).decode("utf-8")


def shift(text, remove, prefix):
    """`text` with `remove` leading columns taken from, and `prefix` put before, each line
    outside string literals (a multi-line string's own lines keep their spaces)."""
    inside = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                inside.update(range(tok.start[0] + 1, tok.end[0] + 1))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    out = []
    for k, line in enumerate(text.split("\n"), start=1):
        if k not in inside:
            if line[:remove].strip() == "":
                line = line[remove:]
            if line:
                line = prefix + line
        out.append(line)
    return "\n".join(out)


def numpy_path(value):
    """`np.<path>` naming `value` in numpy (checked to give the same object), or None."""
    if isinstance(value, types.ModuleType):
        if value.__name__ == "numpy" or value.__name__.startswith("numpy."):
            return "np" + value.__name__[len("numpy"):]
        return None
    owner = getattr(value, "__self__", None)
    if isinstance(owner, np.ufunc):      # a ufunc method: np.add.reduce
        base = numpy_path(owner)
        if base and getattr(owner, value.__name__, None) == value:
            return f"{base}.{value.__name__}"
        return None
    name = getattr(value, "__name__", None)
    if not isinstance(name, str):
        return None
    mod = getattr(value, "__module__", None) or ""
    for path in ("numpy", mod, "numpy.linalg", "numpy.fft", "numpy.lib.stride_tricks"):
        if not (path == "numpy" or path.startswith("numpy.")):
            continue
        obj = sys.modules.get(path)
        try:
            if obj is not None and vars(obj).get(name) is value:
                target = np
                for part in path.split(".")[1:] + [name]:
                    target = getattr(target, part)
                if target is value:
                    return "np" + path[len("numpy"):] + "." + name
        except AttributeError:
            continue
    return None


def is_builtin(value):
    """True if `value` is a builtin (len, range, ValueError) under its own name."""
    name = getattr(value, "__name__", None)
    return isinstance(name, str) and getattr(builtins, name, None) is value

