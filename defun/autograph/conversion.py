"""Which functions are converted, converting them once (cached per code object), and
`callee`, through which converted code makes every call.

Converted: the user's own Python functions (plain, nested, closures, methods, lambdas:
one sharing its line with others is found by its columns, on Python >= 3.11), the __init__
of the user's classes made in converted code, not those of installed packages, the
standard library or defun.
The converted function is compiled under the original file name with the original line
numbers, and shares the original's globals and closure cells (only `ag__` is added).

The module is long because finding a function's source as written (a def's lines, a lambda
among others on its line, a file changed since it was loaded) belongs with converting it.
"""
import ast
import builtins
import copy
import dis
import functools
import inspect
import linecache
import os
import sys
import sysconfig
import threading
import time
import types
import weakref

from defun.runtime import backprop, custom_gradient, errors, sites
from defun import control_flow as cf
from defun.autograph import operators
from defun.autograph.transformer import AG, GEN, Converter, _located

_JUMPS = frozenset(dis.hasjrel + dis.hasjabs)
_STARTED = time.time()      # files changed since: see _edited
_LOCK = threading.RLock()
_TRACE = threading.local()      # .on: False while a df.defun(..., autograph=False) traces its function
_CACHE = {}     # id(code object) -> _Converted or a _Skip (_Self: converted code itself), holding that code
# (by id: hashing a code object hashes its contents, and equal code from two files must stay apart)
_MADE = {}      # id(function) -> (weak reference to it, its code, a weak reference to its converted function,
# or None: call it as it is (a library's or defun's plain function)). Weak both ways: the converted
# function holds the original (__wrapped__), so a strong one here would keep every converted
# function of the process alive (df.defun of a closure made in a loop); a converted function no
# one holds any more is made again from its cached code when next called.


class _Skip:
    """Not converted, and why (`quiet`: a library's or defun's own function, nothing to say)."""

    __slots__ = ("why", "quiet", "of")

    def __init__(self, why, quiet=False, of=None):
        self.why, self.quiet, self.of = why, quiet, of


class _Self(_Skip):
    """Code that is itself converted code: called as it is."""

    __slots__ = ()


class _Converted:
    __slots__ = ("code", "source", "of")

    def __init__(self, code, source):
        # source: how to parse the function again for to_code (its lines, or a lambda's node),
        # not the converted tree: thousands of objects kept for every function make garbage
        # collection slower for the whole program
        self.code, self.source, self.of = code, source, None


def _library_roots():
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)}
    roots.add(os.path.dirname(os.__file__))
    return tuple(os.path.abspath(r) + os.sep for r in roots if r)


_LIBRARY = _library_roots()


def _why_not(f):
    """A _Skip for function `f` that is not converted, or None."""
    code = f.__code__
    file = code.co_filename
    if sites._is_own(file):
        return _Skip("it is part of defun", True)
    if file.startswith("<"):
        return _Skip(f"its source cannot be read: it was defined in {file} (a REPL, exec or eval)")
    if os.path.abspath(file).startswith(_LIBRARY):
        return _Skip("it belongs to an installed package or the standard library", True)
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return _Skip("it is a generator or coroutine, which autograph does not convert")
    return None


def converted(f):
    """The converted version of plain function `f`, or `f` itself when it is not converted."""
    made = _MADE.get(id(f))
    if made is not None and made[0]() is f and made[1] is f.__code__:
        if made[2] is None:
            return f
        g = made[2]()
        if g is not None:
            return g
    entry = _entry(f)
    if not isinstance(entry, _Converted):
        return f
    own = types.CellType()      # the function's own name, where the converted code closes over it
    closure = tuple(types.CellType(_NAMESPACE) if name == AG else _cell(f, name, own)
                    for name in entry.code.co_freevars)
    g = types.FunctionType(entry.code, f.__globals__, f.__name__, f.__defaults__, closure)
    own.cell_contents = g       # a recursive call runs the converted function too
    g.__kwdefaults__ = f.__kwdefaults__
    g.__qualname__, g.__module__, g.__doc__ = f.__qualname__, f.__module__, f.__doc__
    g.__dict__.update(f.__dict__)
    g.__wrapped__ = f
    _remember(f, g)
    return g


def _remember(f, g):
    """Note what `callee` gives for function `f`: `g` (its converted function) or None (f itself)."""
    key, code = id(f), f.__code__

    def forget(ref, made=_MADE):    # (bound now: at exit the module's globals may be gone first)
        if made.get(key, (None,))[0] is ref:
            del made[key]
    _MADE[key] = (weakref.ref(f, forget), code, None if g is None else weakref.ref(g))


def _cell(f, name, own):
    """The cell of `f` for free name `name`; `own` for f's own name (a recursive function's
    reference to itself is a global in f but a free name of the converted code)."""
    names = f.__code__.co_freevars
    if name in names:
        return f.__closure__[names.index(name)]
    return own


def _entry(f):
    code = f.__code__
    entry = _CACHE.get(id(code))
    if entry is None or entry.of is not code:
        with _LOCK:
            entry = _CACHE.get(id(code))
            if entry is None or entry.of is not code:
                entry = _why_not(f) or _convert(f)
                entry.of = code
                _CACHE[id(code)] = entry
    return entry


def reason_not_converted(f):
    """Why `f` is not converted (None when it is, or when nothing needs saying)."""
    f = inspect.unwrap(f) if not isinstance(f, types.FunctionType) else f
    if not isinstance(f, types.FunctionType):
        return f"it is a {type(f).__name__}, not a Python function with source"
    entry = _entry(f)
    return entry.why if isinstance(entry, _Skip) and not entry.quiet else None


def _convert(f):
    """A _Converted for function `f` (or a _Skip saying why its source cannot be converted)."""
    code = f.__code__
    linecache.checkcache(code.co_filename)      # a file edited (and its module reloaded) since it was read
    lines = linecache.getlines(code.co_filename, f.__globals__)
    if len(lines) < code.co_firstlineno:
        return _Skip(f"its source cannot be read ({code.co_filename} has no line {code.co_firstlineno})")
    try:
        node, source = _parse(lines, code)
    except _NoSource as e:
        return _Skip(str(e))
    new = _rewritten(node, source)
    factory_args = [AG] + [n for n in code.co_freevars if n != "__class__"]
    body = [new]
    if "__class__" in code.co_freevars:    # zero-argument super(): keep the class cell
        owner = f.__qualname__.rsplit(".", 2)[-2] if "." in f.__qualname__ else "C"
        body = [ast.ClassDef(name=owner, bases=[], keywords=[], body=body, decorator_list=[])]
        factory_args.append("__class__")
    factory = ast.FunctionDef(name="factory__ag", args=ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=a) for a in factory_args], vararg=None, kwonlyargs=[],
        kw_defaults=[], kwarg=None, defaults=[]), body=body, decorator_list=[], returns=None, type_comment=None)
    if "type_params" in ast.FunctionDef._fields:
        factory.type_params = []
    module = ast.Module(body=_located([factory], node), type_ignores=[])
    try:
        compiled = compile(module, code.co_filename, "exec", dont_inherit=True)
    except SyntaxError as e:
        return _Skip(f"its converted form does not compile ({e.msg} at line {e.lineno})")
    target = _find_code(_named(compiled, None), code.co_name, node.lineno)
    if target is None:
        return _Skip("its converted code could not be found")
    _mark_converted(target)
    return _Converted(target, source)


def _rewritten(node, source):
    """The converted tree of FunctionDef or Lambda `node` (a lambda as `lambda__ag = lambda ...`);
    `source`: its lines, as _parse gives them (a lambda's node)."""
    new = Converter().function(node, walrus=isinstance(source, ast.AST) or any(":=" in t for t in source[0]))
    if isinstance(new, ast.Lambda):
        new = _located([ast.Assign(targets=[ast.Name(id="lambda__ag", ctx=ast.Store())], value=new)], node)[0]
    return new


class _NoSource(Exception):
    pass


_FILES = {}      # file name -> (its lines as linecache gave them, {first line: [def/lambda nodes]})
_FILES_KEPT = 4  # the files indexed last (a lambda's, or a def not parsed alone): a whole file's tree is large


def _index(filename, lines):
    """{first line (a decorator's, for a decorated def): [FunctionDef/Lambda nodes]} of a file."""
    got = _FILES.get(filename)
    if got is not None and got[0] is lines:
        return got[1]
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        tree = ast.Module(body=[], type_ignores=[])
    index = {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            first = min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])
            index.setdefault(first, []).append(n)
    while len(_FILES) >= _FILES_KEPT:
        del _FILES[next(iter(_FILES))]
    _FILES[filename] = (lines, index)
    return index


def _parse(lines, code):
    """A fresh FunctionDef or Lambda node of `code`, with the file's line numbers and columns,
    and how to parse it again (to_code): a def is parsed from its own lines, found from the
    lines of its code; the whole file (once) only when that fails, and for a lambda."""
    if code.co_name != "<lambda>":
        first = code.co_firstlineno - 1
        source = (lines[first:_last_line(code, lines)], first, code)
        node = _segment(*source)
        if node is not None:
            return node, source
    found = _index(code.co_filename, lines).get(code.co_firstlineno, [])
    if code.co_name == "<lambda>":      # (of its parameters, holding its columns: another lambda at
        found = _by_columns([n for n in found if isinstance(n, ast.Lambda) and _params(n, code)], code)
        if len(found) == 1 and _edited(code.co_filename):
            found = [n for n in found if _compiles_to(n, code)]
        if not found:                   # its line once the file changed is not converted in its place)
            raise _NoSource("its source could not be found as written (was the file changed since it was loaded?)")
        if len(found) != 1:
            raise _NoSource("it is a lambda whose line does not hold it alone (several lambdas on it), and "
                            "its columns could not tell which it is (they need Python 3.11 or later)")
        return copy.deepcopy(found[0]), found[0]
    found = [n for n in found if not isinstance(n, ast.Lambda) and n.name == code.co_name]
    source = (lines[found[0].lineno - 1:found[0].end_lineno], found[0].lineno - 1, code) if len(found) == 1 else None
    node = _segment(*source) if source else None
    if node is None:
        raise _NoSource("its source could not be found as written (was the file changed?)")
    return node, source


def _last_line(code, lines):
    """The end (exclusive, 0-based) of the lines of the def of `code`, found without parsing:
    past the last line its code (and its nested functions' code) starts an instruction on,
    then past the blank, comment and further-indented lines after it. A string or bracket
    going on at a lower indentation is cut short there: that fails to parse (see _parse)."""
    last, todo = code.co_firstlineno, [code]
    while todo:
        c = todo.pop()
        for _, _, line in c.co_lines():
            if line is not None and line > last:
                last = line
        todo.extend(k for k in c.co_consts if type(k) is types.CodeType)
    head = lines[code.co_firstlineno - 1]
    indent = len(head) - len(head.lstrip(" \t"))
    while last < len(lines):
        line = lines[last]
        text = line.lstrip(" \t")
        if text and text[0] not in "#\r\n" and len(line) - len(text) <= indent:
            break
        last += 1
    return last


def _segment(lines, first, code):
    """The FunctionDef of `code` that `lines` (the file's from 0-based line `first` on) hold
    alone (decorators left out), with the file's line numbers and columns, or None when they
    do not parse as a def of its name and parameters (a file changed since it was loaded)."""
    text = "".join(lines)
    indent = len(text) - len(text.lstrip(" \t"))
    if indent and not first:
        return None
    try:      # an indented def parses in an `if` block: its lines and columns are the file's as they are
        tree = ast.parse("\n" * first + text if not indent else "\n" * (first - 1) + "if 1:\n" + text)
    except (SyntaxError, ValueError):
        return None
    body = tree.body[0].body if indent else tree.body
    if len(body) != 1 or type(body[0]) is not ast.FunctionDef or body[0].name != code.co_name:
        return None
    if not _params(body[0], code):
        return None
    body[0].decorator_list = []
    return body[0]


def _params(node, code):
    """Whether def or lambda `node` has the parameters of `code` (true of what has none to tell)."""
    if not hasattr(code, "co_varnames"):
        return True
    a = node.args
    params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if p is not None]
    return tuple(params) == code.co_varnames[:len(params)] and len(params) == code.co_argcount + \
        code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)


def _edited(file):
    """Whether `file` changed after defun was imported (its modules may then run code its
    lines no longer hold: only then is a lambda's code compared with them, 0.4 ms)."""
    try:
        return os.stat(file).st_mtime >= _STARTED
    except OSError:
        return True


def _compiles_to(node, code):
    """Whether lambda `node` compiles to `code` (bytecode, names, constants): in a file changed
    since it was loaded, the line of `code` may hold another lambda of its parameters and
    columns (`"sub": lambda a, b: a - b` a line below `"add": lambda a, b: a + b`)."""
    wrapper = ast.FunctionDef(name="w__ag", args=ast.arguments(        # its free names: cells, as they are
        posonlyargs=[], args=[ast.arg(arg=n) for n in code.co_freevars], vararg=None, kwonlyargs=[],
        kw_defaults=[], kwarg=None, defaults=[]), body=[ast.Return(value=copy.deepcopy(node))],
        decorator_list=[], returns=None, type_comment=None)
    if "type_params" in ast.FunctionDef._fields:
        wrapper.type_params = []
    try:
        compiled = compile(ast.fix_missing_locations(ast.Module(body=[wrapper], type_ignores=[])),
                           code.co_filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    outer = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    return any(isinstance(c, types.CodeType) and _alike(c, code) for c in outer.co_consts)


def _alike(a, b):
    return _instructions(a) == _instructions(b)


def _instructions(code):
    """`code`'s instructions, as far as its source decides them: a method call's LOAD_METHOD as
    LOAD_ATTR (Python 3.11 does not use it on an imported name: it depends on the module), no
    jump offsets (instruction sizes differ with that), nested code alike."""
    return [("LOAD_ATTR" if i.opname == "LOAD_METHOD" else i.opname,
             _instructions(i.argval) if isinstance(i.argval, types.CodeType) else
             None if i.opcode in _JUMPS else repr(i.argval))
            for i in dis.get_instructions(code) if i.opname not in ("PRECALL", "CACHE", "NOP")]


def _by_columns(lambdas, code):
    """[the one of `lambdas` (on one line) that is `code`]: the innermost whose body holds the
    line and column of every instruction of `code` (Python >= 3.11's co_positions; none: the
    file changed); all of `lambdas` when that cannot tell. ((0, 0) columns are not the body's:
    its start and end.)"""
    positions = getattr(code, "co_positions", None)
    spans = [((a, c), (b, d)) for a, b, c, d in positions() if None not in (a, b, c, d) and (c, d) != (0, 0)] \
        if positions is not None else []
    holding = [n for n in lambdas if spans and all(
        (n.body.lineno, n.body.col_offset) <= lo and hi <= (n.body.end_lineno, n.body.end_col_offset)
        for lo, hi in spans)]
    return [max(holding, key=lambda n: (n.lineno, n.col_offset))] if holding else [] if spans else lambdas


def _named(code, owner):
    """`code` with the functions the rewrite added named as the user's function they are
    part of (`owner`), so that a traceback through them reads like the user's code."""
    gen = GEN in code.co_name
    name = owner if gen and owner else code.co_name
    inner = name if code.co_name != "factory__ag" else None
    consts = tuple(_named(c, inner) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    if not gen:
        return code.replace(co_consts=consts)
    return code.replace(co_consts=consts, co_name=name, co_qualname=f"{code.co_qualname.split('.<locals>')[0]}")


def _find_code(code, name, lineno):
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name and c.co_firstlineno == lineno:
                return c
            found = _find_code(c, name, lineno)
            if found is not None:
                return found
    return None


def _mark_converted(code):
    _CACHE[id(code)] = _Self("it is converted code", True, code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _mark_converted(c)


def to_code(f):
    """The converted source of `f` (a function or df.defun) as a string."""
    fn = getattr(f, "python_function", f)
    fn = getattr(fn, "__func__", fn)
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"to_code expects a Python function, got {type(f).__name__}")
    entry = _entry(fn)
    if isinstance(entry, _Self):
        raise ValueError(f"{fn.__qualname__} is already converted code")
    if isinstance(entry, _Skip):
        raise errors.TracingError(f"{fn.__qualname__} is not converted: {entry.why}")
    source = entry.source
    node = copy.deepcopy(source) if isinstance(source, ast.Lambda) else _segment(*source)
    return ast.unparse(_rewritten(node, source)) + "\n"


def callee(f):
    """What converted code calls for `f` (`ag__.callee(f)(*args)`): the user's functions
    converted, defun's and libraries' as they are. Only `f` is looked at, so the call itself
    runs in the user's frame as written (no repacking of its arguments: tracing cost)."""
    t = type(f)
    if t is _FUNCTION:
        made = _MADE.get(id(f))     # a function seen before (its code unchanged)
        if made is not None:
            ref, code, g = made
            if ref() is f and code is f.__code__:
                if g is None:
                    return f
                g = g()
                if g is not None:
                    return g
        return _function_callee(f)
    if t is type or t is types.BuiltinFunctionType:     # range, len, print ...; a class
        special = _SPECIAL.get(f)
        return special if special is not None else _class_callee(f) if t is type else f
    if t is types.MethodType and type(f.__func__) is types.FunctionType:
        g = converted(f.__func__)
        return f if g is f.__func__ else types.MethodType(g, f.__self__)
    if t is _LRU_CACHE or (t is types.MethodType and type(f.__func__) is _LRU_CACHE):
        inner = _unwrapped(f.__func__ if t is types.MethodType else f)
        if inner is not None:
            return types.MethodType(inner, f.__self__) if t is types.MethodType else inner
    if isinstance(f, type) and t.__call__ is type.__call__:     # a class with a metaclass (ABCMeta ...)
        return _class_callee(f)
    method = getattr(t, "__call__", None)
    if type(method) is types.FunctionType:      # an object of the user's class with __call__
        g = converted(method)
        if g is not method:
            return types.MethodType(g, f)
    return f


def _function_callee(f):
    """`callee` of Python function `f` the first time (or after its code changed)."""
    entry = _entry(f)
    if entry.__class__ is _Converted:
        return converted(f)
    if not entry.quiet:
        why = entry.why
        return lambda *args, **kwargs: _annotated(f, why, args, kwargs)
    if f.__code__ is _CUSTOM_GRADIENT_CODE:     # @df.custom_gradient on the user's function
        return _custom_gradient_of(f)
    if f in backprop.MADE_FROM:     # df.gradients_function(fn) made outside converted code
        return _gradient_function_of(f)
    inner = _unwrapped(f) if hasattr(f, "__wrapped__") else None
    if inner is f:
        _remember(f, None)      # a converted function (a recursive one calling itself): as it is from now on
    if inner is not None:
        return inner
    if f in _TAKES_FUNCTIONS:     # df.cond(p, true_fn, false_fn), df.map_fn(fn, xs): the user's fns convert
        return lambda *args, **kwargs: f(*[_converted_arg(a) for a in args],
                                         **{k: _converted_arg(a) for k, a in kwargs.items()})
    if not hasattr(f, "__wrapped__"):
        _remember(f, None)      # a library's or defun's plain function: called as it is from now on
    return f


def _converted_arg(a):
    """An argument of a function taking functions: the user's function (or method) converted."""
    t = type(a)
    if t is types.FunctionType:
        return converted(a)
    if t is types.MethodType and type(a.__func__) is types.FunctionType:
        g = converted(a.__func__)
        return a if g is a.__func__ else types.MethodType(g, a.__self__)
    return a


def _gradient_function_of(f):
    """The gradient function `f` (made by df.gradients_function and its kin: backprop's
    MADE_FROM, the maker and what it was given) made again around the user's function
    converted; `f` itself when that is not converted."""
    made = _REWRAPPED.get(f)
    if made is None:
        maker, fn, *rest = backprop.MADE_FROM[f]
        g = _converted_arg(fn)
        if g is fn:
            return f
        made = _REWRAPPED[f] = maker(g, *rest)
    return made


def _custom_gradient_of(f):
    """The custom_gradient wrapper `f` made, around the user's function converted."""
    made = _REWRAPPED.get(f)
    if made is None:
        inner = getattr(f, "__wrapped__", None)
        g = converted(inner) if type(inner) is types.FunctionType else inner
        made = _REWRAPPED[f] = f if g is inner else custom_gradient.custom_gradient(g)
    return made


def tracing(on):
    """Say whether the df.defun trace about to run converts its function (autograph=`on`);
    returns what to restore after it (for_tracing follows the innermost such trace)."""
    saved = getattr(_TRACE, "on", True)
    _TRACE.on = on
    return saved


def for_tracing(fn):
    """`fn` as a transformation that traces it calls it (df.vmap): converted as df.defun
    converts its function (the user's own functions and methods; anything else as it is),
    unless the df.defun being traced has autograph=False (then as it is, as the defun's own)."""
    if not getattr(_TRACE, "on", True):
        return fn
    if type(fn) is types.FunctionType and not fn.__code__.co_flags & (
            inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR):
        return entry_point(fn)
    return _converted_arg(fn)


def _class_callee(cls):
    """`callee` of a class made with type.__call__: made as Python makes it, the user's
    __init__ converted (a library's class, or one whose __init__ is not converted: as it is)."""
    init = cls.__init__
    if type(init) is types.FunctionType:
        g = converted(init)
        if g is not init:
            return lambda *args, **kwargs: _instance(cls, g, args, kwargs)
    return cls


def _instance(cls, init, args, kwargs):
    """`cls(*args, **kwargs)` as Python makes it (type.__call__), its __init__ the converted `init`."""
    new = cls.__new__
    obj = object.__new__(cls) if new is object.__new__ else new(cls, *args, **kwargs)
    if isinstance(obj, cls):
        init(obj, *args, **kwargs)
    return obj


def _annotated(f, why, args, kwargs):
    """Call unconverted `f`; a TracingError from it also says why it was not converted."""
    try:
        return f(*args, **kwargs)
    except errors.TracingError as e:
        note = f" ({f.__qualname__} was not converted by autograph: {why})"
        if e.args and isinstance(e.args[0], str) and "not converted by autograph" not in e.args[0]:
            e.args = (e.args[0] + note,) + e.args[1:]
        raise


def _unwrapped(f):
    """The converted user function a library decorator (functools.lru_cache, a wrapper made
    with functools.wraps) wraps, or None: the decorator is left out (it only caches or
    forwards here) so that the user's own code is converted."""
    if hasattr(f, "registry"):      # functools.singledispatch chooses by type: not a plain forward
        return None
    if type(f) is types.FunctionType and sites._is_own(f.__code__.co_filename):
        return None                 # defun's own wrappers (a defun's bound method) stay
    inner = inspect.unwrap(f)
    if type(inner) is not types.FunctionType or inner is f:
        return None
    g = converted(inner)
    return g if g is not inner else None


def entry_point(f):
    """What df.defun traces for `f` with autograph on."""
    if type(f) is types.MethodType and type(f.__func__) is types.FunctionType:     # df.defun(obj.method)
        g = entry_point(f.__func__)
        return f if g is f.__func__ else types.MethodType(g, f.__self__)
    fn = f
    if type(f) is types.FunctionType and f in backprop.MADE_FROM:    # df.defun(df.gradients_function(loss))
        return _gradient_function_of(f)
    inner = _unwrapped(f) if type(f) is _LRU_CACHE or (isinstance(f, types.FunctionType) and hasattr(
        f, "__wrapped__") and isinstance(_entry(f), _Skip) and _entry(f).quiet) else None
    if inner is not None:
        return inner
    if isinstance(f, types.FunctionType) and f.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR):
        raise errors.UnimplementedError(
            f"df.defun({f.__qualname__}): {f.__qualname__} is a generator function, and generators cannot be "
            f"traced: a graph returns tensors, not a generator. Iterate it inside the defun instead (`for v in "
            f"{f.__name__}(...)`, `list({f.__name__}(...))`): called there, generators run as in Python")
    if isinstance(f, types.FunctionType):
        g = converted(f)
        if g is not f:
            return g
    why = reason_not_converted(fn) if isinstance(fn, types.FunctionType) else None
    if why is None:
        return f

    def traced_as_written(*args, **kwargs):
        return _annotated(fn, why, args, kwargs)
    return traced_as_written


_LRU_CACHE = type(functools.lru_cache(None)(len))
_FUNCTION = types.FunctionType
_CUSTOM_GRADIENT_CODE = custom_gradient.custom_gradient(len).__code__
_REWRAPPED = weakref.WeakKeyDictionary()     # a custom_gradient or gradient function -> the one around its fn converted
# defun's functions taking the user's functions, which convert when converted code passes them
# (df.vmap and df.defun convert the function they trace themselves, called from anywhere)
_TAKES_FUNCTIONS = frozenset([cf.cond, cf.while_loop, cf.scan, cf.map_fn, cf.foldl, backprop.gradients_function,
                              backprop.value_and_gradients_function, backprop.implicit_gradients,
                              backprop.implicit_value_and_gradients, custom_gradient.custom_gradient])
_SPECIAL = {builtins.print: operators.print_, builtins.range: operators.range_, builtins.len: operators.len_,
            builtins.enumerate: operators.enumerate_, builtins.zip: operators.zip_}
_NAMESPACE = types.SimpleNamespace(**{n: getattr(operators, n) for n in operators.__all__}, callee=callee)
