"""Python source of live values: an op's kernel and everything it reaches, as numpy-only code.

`SourceWriter.ref(value)` returns the text that stands for `value` in a module being
written, adding whatever definitions it needs:

    numpy objects        `np.tanh`, `np.add.reduce`, `np.linalg`, `np.dtype('float32')`
    constants            literals: `3`, `(0, 1)`, `'SAME'`, `None`, `float('inf')`
    functions, classes   of this project's packages: their own source, read from the module
                         that defines them, emitted once each; the globals they use are
                         followed through their code objects (LOAD_GLOBAL names, attribute
                         chains on project modules, closure cells) and renamed where a
                         name is already taken; `errors.X` becomes the small class it is
    arrays, containers   module-level names (arrays frozen read-only, as graph constants)
    DTypes               a small stand-in class with the fields kernels read (`.np`, ...)

Anything else (a graph, an op object, a stdlib module other than math, operator, string
and sys) raises
`UnimplementedError` naming the value and where it was met. Before emitting a function, its
source is compiled again and its bytecode compared with the running code, so the module
holds exactly what the library runs.
"""
import ast
import builtins
import functools
import keyword
import re
import sys
import types

import numpy as np

from defun.runtime import errors
from defun.runtime.dtypes import DType
from defun.graph.numpy_source.reader import (STDLIB, Lookup, apply_edits, base_spans, bound_names,
                                             class_body_names, find_class_node, find_code_node,
                                             functions_of, global_names, header_lines, is_builtin,
                                             is_project, module_source, numpy_path, references,
                                             refuse, shift)

__all__ = ["SourceWriter", "numpy_type"]

# Modules whose functions need the library at run time (dispatch, tensors, tapes): a kernel
# reaching one cannot stand alone.
_LIBRARY_ONLY = tuple("defun." + m for m in (
    "runtime.execute", "runtime.context", "runtime.tape", "runtime.tensor", "runtime.registry",
    "runtime.backprop", "runtime.autodiff", "graph."))
_MAX_LITERAL = 32     # arrays up to this many (finite) elements are written as literals
_MAX_INLINE = 60      # longer literal constants in code get a module-level name
# local names of the emitted graph and entry functions (inputs, values, loop state)
_GENERATED = re.compile(r"^(a|v|x|loop|count|kept)\d+(_\d+)?$")
_DTYPE_CLASS = '''\
class DType:
    """A tensor element type as the kernels see it: its name and numpy dtype."""

    __slots__ = ("name", "np", "as_numpy_dtype", "is_floating", "is_integer", "is_bool", "is_complex",
                 "is_inexact")

    def __init__(self, name, np_dtype, is_floating=False, is_integer=False, is_bool=False,
                 is_complex=False):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.as_numpy_dtype = self.np.type
        self.is_floating, self.is_integer, self.is_bool = is_floating, is_integer, is_bool
        self.is_complex, self.is_inexact = is_complex, is_floating or is_complex

    def __repr__(self):
        return f"DType({self.name!r})"
'''


class SourceWriter:
    """Names and definitions of the values a numpy-only module refers to.

    `blocks` holds the definitions in an order that runs (what a value needs comes first);
    `imports` the standard-library modules used besides numpy.
    """

    def __init__(self, reserved=()):
        self.blocks = []
        self.imports = set()
        # never given out: builtins, keywords, the modules the code may import (an import
        # can come after a name is claimed) and dunders (__builtins__ would replace builtins)
        self._taken = set(reserved) | set(dir(builtins)) | set(keyword.kwlist) | {"np"} | set(STDLIB)
        self._named = {}       # id(value) -> name
        self._keep = []        # the values named, so their ids stay theirs
        self._literals = {}    # literal text -> its module-level name
        self._arrays = {}      # (dtype, shape, bytes) -> the name of a constant array

    # ------------------------------------------------------------------ names
    def claim(self, preferred, prefix="def"):
        """A new module-level name: `preferred` when free, else `prefix_preferred`, numbered."""
        base = re.sub(r"\W", "_", str(preferred)) or prefix
        if base[0].isdigit():
            base = f"{prefix}_{base}"
        candidates = [base, f"{prefix}_{base.lstrip('_')}"]
        k = 1
        while True:
            for c in candidates:
                if c not in self._taken and not _GENERATED.match(c) and c.isidentifier() \
                        and not c.startswith("__"):
                    self._taken.add(c)
                    return c
            candidates = [f"{base}_{k}"]
            k += 1

    def name_of(self, value):
        """The module-level name given to `value`, or None."""
        return self._named.get(id(value))

    def _name_for(self, value, preferred, prefix):
        name = self.claim(preferred, prefix)
        self._named[id(value)] = name
        self._keep.append(value)
        return name

    def stand_in(self, value, text):
        """The name of a class written from `text` (a `class Name:` block) standing for the
        library's `value` in the module: the fields kernels read, none of the machinery."""
        known = self._named.get(id(value))
        if known is None:
            head = text.split(":", 1)[0]           # "class Name"
            known = self._name_for(value, head.split()[1], "defun")
            self.blocks.append(text.replace(head + ":", f"class {known}:", 1))
        return known

    # ------------------------------------------------------------------ values
    def ref(self, value, hint="value", where="the function", inline=False):
        """The source text standing for `value` (defining it first when it needs a name).

        A long literal (tuple, frozenset, str) gets a module-level name unless `inline`."""
        known = self._named.get(id(value))
        if known is not None:
            return known
        if value is None or value is Ellipsis or isinstance(value, (bool, int, bytes)):
            return "..." if value is Ellipsis else repr(value)
        if isinstance(value, str):
            return self._long(repr(value), hint, inline)
        if isinstance(value, float):
            return _float_literal(value)
        if isinstance(value, complex):
            return f"complex({_float_literal(value.real)}, {_float_literal(value.imag)})"
        if type(value) is tuple:
            items = [self.ref(v, hint, where, inline) for v in value]
            text = "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
            return self._long(text, hint, inline)
        if type(value) is frozenset:
            items = sorted(self.ref(v, hint, where, inline) for v in value)
            text = "frozenset({" + ", ".join(items) + "})" if items else "frozenset()"
            return self._long(text, hint, inline)
        if type(value) is slice:
            return "slice(" + ", ".join(self.ref(v, hint, where) for v in
                                        (value.start, value.stop, value.step)) + ")"
        if isinstance(value, np.ndarray):
            return self.array(value, hint)
        if isinstance(value, (np.generic, np.dtype, np.ufunc)) or numpy_path(value):
            return self._numpy(value, where)
        if isinstance(value, DType):
            return self._dtype(value)
        if type(value) in (dict, list, set):
            return self._container(value, hint, where, False)
        if isinstance(value, functools._lru_cache_wrapper) and \
                is_project(getattr(value, "__module__", None)):
            # the cache changes no result: the function itself is emitted
            return self.ref(value.__wrapped__, hint, where)
        if isinstance(value, types.ModuleType):
            if value.__name__ in STDLIB:
                self.imports.add(value.__name__)
                return value.__name__
            refuse(f"module {value.__name__}", where)
        if isinstance(value, types.FunctionType) and is_project(value.__module__):
            return self._function(value, hint, where)
        if isinstance(value, type) and is_project(value.__module__):
            return self._class(value, where)
        if is_builtin(value):
            return value.__name__
        mod = getattr(value, "__module__", None) or getattr(type(value), "__module__", "")
        if mod in STDLIB and getattr(sys.modules[mod], getattr(value, "__name__", ""), None) is value:
            self.imports.add(mod)
            return f"{mod}.{value.__name__}"
        owner = getattr(value, "__module__", None)
        if isinstance(owner, str) and isinstance(getattr(value, "__qualname__", None), str):
            refuse(f"{owner}.{value.__qualname__} (not this library's code)", where)
        refuse(f"{hint}, a {type(value).__module__}.{type(value).__qualname__}", where)

    def _long(self, text, hint, inline):
        """`text`, or a module-level name bound to it when it is long (read once, not inlined
        at every use)."""
        if inline or len(text) <= _MAX_INLINE:
            return text
        return self.literal_name(text, hint)

    def literal_name(self, text, hint):
        """A module-level name bound to the literal `text` (one per distinct text)."""
        name = self._literals.get(text)
        if name is None:
            name = self._literals[text] = self.claim(hint, "const")
            self.blocks.append(f"{name} = {text}")
        return name

    def array(self, value, hint="const"):
        """A module-level read-only array equal to `value` bit for bit (one name per distinct
        contents: the optimized copies of a graph hold equal constants)."""
        key = (value.dtype.str, value.shape, value.tobytes())
        name = self._arrays.get(key)
        if name is None:
            name = self._arrays[key] = self._name_for(value, hint, "const")
            self.blocks.append(f"{name} = _frozen({_array_text(value)})")
        return name

    def array_text(self, value):
        """Source building an array equal to `value` bit for bit (a literal, or hex bytes)."""
        return _array_text(value)

    def instance(self, value, preferred, constructor_text, comment=""):
        """A module-level object made by `constructor_text` (e.g. a variable's cell)."""
        name = self._name_for(value, preferred, "var")
        self.blocks.append(f"{comment}{name} = {constructor_text}")
        return name

    def _numpy(self, value, where):
        if isinstance(value, np.dtype):
            if value.fields is not None or value.subdtype is not None:
                refuse(f"the structured dtype {value}", where)
            return f"np.dtype({value.str!r})" if value.byteorder not in "=|" else f"np.dtype({value.name!r})"
        if isinstance(value, np.generic):
            kind = numpy_type(value.dtype)
            if isinstance(value, np.floating) and not np.isfinite(value):
                return f"{kind}({_float_literal(float(value))})"
            if isinstance(value, (np.floating, np.integer, np.bool_)) or \
                    isinstance(value, np.complexfloating) and np.isfinite(value):
                return f"{kind}({value.item()!r})"
            refuse(f"the numpy scalar {value!r}", where)
        path = numpy_path(value)
        if path is None:
            refuse(f"{value!r}", where)
        return path

    def _dtype(self, value):
        cls = self.stand_in(DType, _DTYPE_CLASS)
        flags = "".join(f", {f}=True" for f in ("is_floating", "is_integer", "is_bool", "is_complex")
                        if getattr(value, f))
        name = self._name_for(value, value.name, "dtype")
        self.blocks.append(f"{name} = {cls}({value.name!r}, "
                           f"{self._numpy(value.np, '')}{flags})")
        return name

    def _container(self, value, hint, where, mutated):
        # A module-level table: the same contents under its own name. One the code changes
        # (a cache: `_PLANS[key] = run`) starts empty, as it did in the library: what it
        # holds now depends on what this process ran, and the module must not.
        name = self._name_for(value, hint, "table")
        if mutated:
            self.blocks.append(f"{name} = {type(value).__name__}()   # filled as the code runs")
            return name
        if type(value) is dict:
            items = [f"{self.ref(k, hint, where)}: {self.ref(v, hint, where)}" for k, v in value.items()]
            text = "{" + ", ".join(items) + "}"
        elif type(value) is list:
            text = "[" + ", ".join(self.ref(v, hint, where) for v in value) + "]"
        else:
            items = sorted(self.ref(v, hint, where) for v in value)
            text = "{" + ", ".join(items) + "}" if items else "set()"
        self.blocks.append(f"{name} = {text}")
        return name

    # ------------------------------------------------------------------ code
    def _function(self, fn, hint, where):
        mod = fn.__module__
        if mod.startswith(_LIBRARY_ONLY):
            refuse(f"{mod}.{fn.__qualname__}, which needs the library itself", where)
        code = fn.__code__
        preferred = hint if fn.__name__ == "<lambda>" else fn.__name__
        name = self._name_for(fn, preferred, mod.rsplit(".", 1)[-1])
        info = module_source(mod)
        node = find_code_node(info, code, fn, where)
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
        here = f"{where} ({mod}.{fn.__qualname__})"
        lookup = Lookup(fn.__globals__, cells, info.mutated)
        text = self._rewrite(info, node, global_names(code) | set(code.co_freevars), lookup, here)
        if isinstance(node, ast.Lambda):
            block = f"{name} = ({text})"
        else:
            block = re.sub(r"^def\s+\w+", f"def {name}", text, count=1)
        self.blocks.append(f"# {mod}.{fn.__qualname__}\n{block}")
        return name

    def _class(self, cls, where):
        mod = cls.__module__
        if mod.startswith(_LIBRARY_ONLY) or type(cls) is not type:
            refuse(f"the class {mod}.{cls.__qualname__}", where)
        here = f"{where} (class {mod}.{cls.__qualname__})"
        bases = []
        for b in cls.__bases__:
            if b is object:
                continue
            bases.append(self.ref(b, b.__name__, here))   # defined before the class
        name = self._name_for(cls, cls.__name__, mod.rsplit(".", 1)[-1])
        info = module_source(mod)
        node = find_class_node(info.tree, cls, here)
        names = set()
        for v in vars(cls).values():
            for f in functions_of(v):
                names |= global_names(f.__code__)
        names |= class_body_names(node)
        lookup = Lookup(vars(sys.modules[mod]), {}, info.mutated)
        text = self._rewrite(info, node, names, lookup, here, skip=set(base_spans(node)))
        header = f"class {name}({', '.join(bases)}):" if bases else f"class {name}:"
        body = text.split("\n", header_lines(node, here))[-1]
        self.blocks.append(f"# {mod}.{cls.__qualname__}\n{header}\n{body}")
        return name

    def _rewrite(self, info, node, global_names, lookup, where, skip=frozenset()):
        """The source of `node` with each global reference replaced by its text here, and
        dedented; `skip`: spans left alone (class bases, written separately)."""
        bound = bound_names(node)
        edits = []
        for target, name, value, in_fstring in references(node, global_names, lookup, where):
            span = (target.lineno, target.col_offset, target.end_lineno, target.end_col_offset)
            if span in skip:
                continue
            if isinstance(value, types.ModuleType):      # numpy or an allowed stdlib module
                text = numpy_path(value) or value.__name__
                if not text.startswith("np"):
                    self.imports.add(value.__name__)
            elif type(value) in (dict, list, set) and id(value) not in self._named:
                text = self._container(value, name, where, name in lookup.mutated)
            else:
                text = self.ref(value, name, where)
                if in_fstring and any(c in text for c in "'\"\\{}"):
                    text = self.literal_name(text, name)   # quotes cannot nest in f-strings
            if text == info.segment(target):
                continue
            if isinstance(target, ast.Name) and target.id in bound:
                refuse(f"the global {target.id!r} also bound locally (cannot rename it to "
                        f"{text!r})", where)
            edits.append((span, text))
        text = apply_edits(info.lines, node, edits)
        return text if isinstance(node, ast.Lambda) else shift(text, node.col_offset, "")


# ---------------------------------------------------------------------------------------
# Literals

def numpy_type(dtype):
    """`np.float32`: the numpy scalar type of `dtype` by a name every numpy 1.24+ has."""
    dtype = np.dtype(dtype)
    return "np.bool_" if dtype.kind == "b" else f"np.{dtype.name}"


def _float_literal(x):
    if x != x:
        return "float('nan')"
    if x in (float("inf"), float("-inf")):
        return "float('inf')" if x > 0 else "-float('inf')"
    return repr(x)


def _array_text(a):
    """numpy source building an array equal to `a` bit for bit: a literal when small and
    finite, else its little-endian bytes in hex (no import beyond numpy needed)."""
    dt = a.dtype
    if dt.kind not in "biufc" or dt.fields is not None:
        raise errors.UnimplementedError(f"numpy source: arrays of dtype {dt} cannot be written")
    shape = tuple(int(d) for d in a.shape)
    if a.size == 0:
        return f"np.zeros({shape!r}, dtype={numpy_type(dt)})"
    if a.size <= _MAX_LITERAL and (dt.kind not in "fc" or np.isfinite(a).all()):
        values = _nested(a.tolist(), dt.kind)
        return f"np.array({values}, dtype={numpy_type(dt)})"
    data = np.ascontiguousarray(a, dtype=dt.newbyteorder("<")).tobytes().hex()
    chunks = [data[i:i + 96] for i in range(0, len(data), 96)] or [""]
    body = "\n    ".join(f'"{c}"' for c in chunks)
    return f"_from_hex({numpy_type(dt)}, {shape!r},\n    {body})"


def _nested(v, kind):
    if isinstance(v, list):
        return "[" + ", ".join(_nested(x, kind) for x in v) + "]"
    return repr(float(v)) if kind == "f" else repr(complex(v)) if kind == "c" else repr(v)


# ---------------------------------------------------------------------------------------
# numpy and builtins


