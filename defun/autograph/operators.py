"""What converted code calls: each rewritten statement or expression decides, when it runs
(at trace time), between graph control flow (its condition or iterable is a symbolic
tensor: one `cond` node, one `while` node, a check op, `df.print`) and plain Python.

Converted code keeps its variables in the converted function's own frame; a statement
reaches them through `get_state()` (their values, a tuple) and `set_state(values)`, both
generated beside it, and through `names` (their names, the same order). `info` holds the
line numbers the converter knew: the statement's line and, per branch or loop body, the
line where each name is first assigned there (for errors that name them).
"""
import builtins
import sys
import threading


from defun.runtime import errors
from defun.runtime.context import state
from defun.runtime.nest import flatten, pack_as
from defun.runtime.ops import math_ops
from defun.runtime.ops.base_ops import cast, shape as shape_of, where
from defun.runtime.ops.debug_ops import print as df_print
from defun.runtime.ops.index_ops import gather
from defun.runtime.tensor import Tensor, convert_to_tensor
from defun.runtime.variables import Variable
from defun.graph.nodes import SymbolicTensor
from defun import control_flow as cf
from defun.autograph import loops
from defun.autograph.values import (RETVAL, Undefined, TensorList, ProbeList, SlotList, condition, merge_branches,
                                    kind_text, mixed_kinds, weak_kind, weak_leaf, weak_outputs, weak_wide, where_text,
                                    WeakValue)

__all__ = ["if_stmt", "while_stmt", "for_stmt", "if_exp", "and_", "or_", "not_", "eq", "ne",
           "assert_stmt", "print_", "list_append", "check_mutation", "ld", "ld_attr", "range_", "len_", "getitem",
           "enumerate_", "zip_", "Undefined", "retval"]

_local = threading.local()


def ld(read, name):
    """The value of the variable `read()` reads, or Undefined(name) when it has none yet."""
    try:
        return read()
    except NameError:
        return Undefined(name)


def ld_attr(read, name):
    """The attribute `read()` reads ('obj.attr'), or Undefined(name) when obj has none yet."""
    try:
        return read()
    except AttributeError:
        return Undefined(name)


def retval(value):
    """What a converted function returns: None when no rewritten return ran; a variable
    with no value (Undefined) in it is an error saying why it has none."""
    if isinstance(value, Undefined):
        if value.name == RETVAL and not value.whole:
            return None
        value.fail()
    if isinstance(value, (list, tuple, dict)):
        for leaf in flatten(value):
            if isinstance(leaf, Undefined):
                leaf.fail()
    return value


# ---------------------------------------------------------------------------------------
# conditions
def eq(a, b, line):
    """`a == b` in a converted condition: a tensor there is an error (identity is meant)."""
    _no_identity(a, b, "==", "df.equal", line)
    return a == b


def ne(a, b, line):
    _no_identity(a, b, "!=", "df.not_equal", line)
    return a != b


_PLAIN = frozenset([int, float, bool, str, type(None)])   # never a tensor: no isinstance tests


def _no_identity(a, b, op, fix, line):
    if a.__class__ in _PLAIN and b.__class__ in _PLAIN:
        return
    if isinstance(a, WeakValue) or isinstance(b, WeakValue):
        return      # numbers joined by a tensor if: `==` compares their values, as Python's do
    if isinstance(a, (Tensor, Variable)) or isinstance(b, (Tensor, Variable)):
        raise errors.TracingError(
            f"`{op}` on a tensor in the condition at {where_text(line)}: on tensors `{op}` "
            f"compares identity, not values; use {fix}(a, b)")


def if_exp(c, true_fn, false_fn, line):
    """`true_fn() if c else false_fn()`: one cond node when c is a symbolic tensor."""
    c = condition(c, "conditional expression", line)
    if not isinstance(c, SymbolicTensor):
        return true_fn() if c else false_fn()
    graphs, (a, b) = cf.trace_branches(state.graph, true_fn, false_fn)
    if cf._structure(a) != cf._structure(b):
        raise errors.InvalidArgumentError(
            f"the conditional expression at {where_text(line)} must return the same nested structure in both "
            f"branches (on a tensor condition it is one cond node): {cf._describe(a)} when true but "
            f"{cf._describe(b)} when false")
    la, lb = flatten(a), flatten(b)
    for x, y in zip(la, lb):    # numbers of two kinds: the if statement's TracingError
        if weak_kind(x) and weak_kind(y) and weak_kind(x) != weak_kind(y):
            raise errors.TracingError(
                f"the conditional expression at {where_text(line)} gives {kind_text(x)} when true but "
                f"{kind_text(y)} when false; on a tensor condition it is one cond node, whose value has one "
                f"dtype on both paths: give both the same kind (1.0 and 2.5, not 1 and 2.5)")
    weak_outputs(graphs, la, lb)        # Python numbers on both sides join as a weak value (as an if's)
    out = cf.join_branches(c, graphs, la, lb)
    here = f"{sys._getframe(1).f_code.co_filename}:{line}"
    out = [WeakValue(o, "a if c else b", here, mixed_kinds(x, y)) if weak_kind(x) and weak_kind(y) else o
           for o, x, y in zip(out, flatten(a), flatten(b))]
    return pack_as(a, out) if la else a


def and_(a, b_fn):
    """`a and b`: short-circuit on Python values, df.logical_and on a symbolic tensor; on
    numbers a tensor if joined (with Python values), `b if a else a` as Python gives it."""
    if isinstance(a, Variable):
        a = a.read_value()
    if not isinstance(a, (SymbolicTensor, WeakValue)):
        return a and b_fn()
    b = b_fn()
    if isinstance(a, WeakValue) and weak_kind(b):
        return _weak_pick(a, b, a)
    return math_ops.logical_and(_as_bool(a), _as_bool(b))


def or_(a, b_fn):
    if isinstance(a, Variable):
        a = a.read_value()
    if not isinstance(a, (SymbolicTensor, WeakValue)):
        return a or b_fn()
    b = b_fn()
    if isinstance(a, WeakValue) and weak_kind(b):
        return _weak_pick(a, a, b)
    return math_ops.logical_or(_as_bool(a), _as_bool(b))


def not_(a):
    if isinstance(a, Variable):
        a = a.read_value()
    if isinstance(a, WeakValue):        # a joined bool, as `not` gives on each path
        return WeakValue(math_ops.logical_not(_as_bool(a)), a.name, a.where)
    if not isinstance(a, SymbolicTensor):
        return not a
    return math_ops.logical_not(_as_bool(a))


def _weak_pick(a, if_true, if_false):
    """`if_true if a else if_false` for joined numbers `a` and Python or joined values: a joined
    value of the wider kind (`flag and 2.5` is False or 2.5: a joined float)."""
    wide = weak_wide(if_true, if_false)
    return WeakValue(where(_as_bool(a), weak_leaf(if_true, wide), weak_leaf(if_false, wide)), a.name, a.where)


def _as_bool(x):
    if isinstance(x, Variable):
        x = x.read_value()
    if isinstance(x, WeakValue):
        x = x.wide
    if isinstance(x, Tensor):
        return x if x.dtype.name == "bool" else math_ops.not_equal(x, cast(0, x.dtype))
    return convert_to_tensor(bool(x))


# ---------------------------------------------------------------------------------------
# if
def if_stmt(c, body, orelse, get_state, set_state, names, info):
    """`if c: body() else: orelse()`; on a symbolic c one cond node over the variables the
    branches assign (each branch must define them alike: see values.merge_branches)."""
    c = condition(c, "if", info[0])
    if not isinstance(c, SymbolicTensor):
        if c:
            body()
        else:
            orelse()
        return
    entry = get_state()
    file = sys._getframe(1).f_code.co_filename

    def run(fn):
        def branch():
            set_state(tuple(_copy(v) for v in entry))
            fn()
            return get_state()
        return branch
    graphs, (a, b) = cf.trace_branches(state.graph, run(body), run(orelse))
    then_leaves, else_leaves, rebuild = merge_branches(a, b, entry, names, info, file)
    weak_outputs(graphs, then_leaves, else_leaves)
    out = cf.join_branches(c, graphs, then_leaves, else_leaves)    # also with no outputs: effects
    after = rebuild(out)
    changed = info[3] if len(info) > 3 else ()
    if changed:     # an object changed in place is still the same object after the if (as in Python)
        after = tuple(_write_back(entry[k], v) if name in changed else v for k, (name, v) in
                      enumerate(zip(names, after)))
    set_state(after)


def _copy(v):
    """A fresh list/dict (and fresh lists/dicts inside it) for each branch, so that what one
    branch changes in place (`x[k] = v`, an append) is not seen by the other."""
    if type(v) is list:
        return [_copy(e) for e in v]
    if type(v) is dict:
        return {k: _copy(e) for k, e in v.items()}
    return v


def _write_back(old, new):
    """`old` (a list or dict from before the if) holding `new`'s contents, nested lists and
    dicts written back into themselves; `new` when they are not alike."""
    if type(old) is dict and type(new) is dict:
        for k in [k for k in old if k not in new]:
            del old[k]
        for k, e in new.items():
            old[k] = _write_back(old[k], e) if k in old else e
        return old
    if type(old) is list and type(new) is list:
        old[:] = [_write_back(o, e) for o, e in zip(old, new)] + new[len(old):] if len(old) <= len(new) else new
        return old
    return new


# ---------------------------------------------------------------------------------------
# loops
def while_stmt(test, body, get_state, set_state, names, info):
    """`while test(): body()`; one while node as soon as the test is a symbolic tensor."""
    stack = _loops()
    while True:
        c = condition(test(), "while", info[0])
        if isinstance(c, SymbolicTensor):
            return loops.tensor_loop(test, body, get_state, set_state, names, info, None, stack)
        if not c:
            return
        stack.append(False)
        try:
            body()
        finally:
            stack.pop()


def for_stmt(iterable, extra_test, body, get_state, set_state, names, info):
    """`for x in iterable: body(x)` while `extra_test()` (breaks and returns) holds: one
    while node over a symbolic tensor's rows or a tensor range, else a Python loop."""
    if isinstance(iterable, Variable):
        iterable = iterable.read_value()
    stack = _loops()
    if isinstance(iterable, (SymbolicTensor, loops.TensorRange, loops.TensorRows)):
        return loops.tensor_loop(extra_test, body, get_state, set_state, names, info, iterable, stack)
    if isinstance(iterable, Tensor) and not iterable.shape:
        raise errors.TracingError(f"the for at {where_text(info[0])} iterates a scalar tensor")
    for item in iterable:
        if extra_test is not None:
            c = condition(extra_test(), "for", info[0])
            if isinstance(c, SymbolicTensor):    # a tensor break: the rest runs under a cond
                if_stmt(c, lambda: _python_body(stack, body, item), _nothing, get_state, set_state,
                        names, (info[0], info[1], ()))
                continue
            if not c:
                break
        _python_body(stack, body, item)


def _python_body(stack, body, item):
    stack.append(False)
    try:
        body(item)
    finally:
        stack.pop()


def _nothing():
    pass


def _loops():
    stack = getattr(_local, "loops", None)
    if stack is None:
        stack = _local.loops = []
    return stack


def check_mutation(name, line):
    """Before `name.attr = ...`, `name[k] = ...` or `name.append(...)` in a loop body, on an
    object made before the loop: refused inside a tensor loop (the loop runs once, traced)."""
    stack = _loops()
    if stack and stack[-1]:
        raise errors.TracingError(
            f"{name!r} is a Python object made before a tensor loop and changed inside it (at "
            f"{where_text(line)}); a tensor loop is traced once, so the change would happen "
            f"once, not per iteration. Carry tensors as loop variables instead (or "
            f"`lst.append(y)` on a list variable, which collects one value per iteration)")


def list_append(lst, value):
    """`lst.append(value)`: in a tensor loop, one row more of the list's tensor."""
    if isinstance(lst, (TensorList, ProbeList, SlotList)):
        return lst.append(value)
    lst.append(value)
    return lst


def getitem(x, index):
    """`x[index]`; a scalar integer tensor index of a tensor `x` gathers its row (a sparse
    gradient), a negative index counting from the end as in Python."""
    if isinstance(index, WeakValue) and isinstance(x, (Tensor, Variable)):   # an index known when it runs
        if index.wide.dtype.is_bool:      # as a Python bool's (a list's index: __index__, UnknownValueError)
            raise TypeError(f"strided_slice: boolean index {index.label} (the Python bools the tensor if at "
                            f"{index.where} joins) is not supported; use df.where or df.gather")
        index = index._int_tensor("a tensor index")
    if isinstance(index, SymbolicTensor) and isinstance(x, (Tensor, Variable)) and index.shape == () \
            and index.dtype.is_integer:
        x = x.read_value() if isinstance(x, Variable) else x
        return gather(x, index if index in loops.COUNTERS else _wrapped(x, index))
    return x[index]


def _wrapped(x, i):
    """Index `i` of axis 0 of `x`, a negative one counted from the end (three scalar ops; a
    counter of a range loop counting up from 0 needs none): an index outside [-n, n) stays
    outside [0, n), which gather refuses when the graph runs."""
    if not x.shape:
        return i        # a scalar: gather says so
    n = x.shape[0] if x.shape[0] is not None else shape_of(x, i.dtype)[0]
    return where(math_ops.less(i, 0), math_ops.add(i, n), i)


def enumerate_(iterable, start=0):
    """`enumerate(...)`: of a symbolic tensor, its rows with their index, for one loop node."""
    if isinstance(iterable, (SymbolicTensor, Variable)):
        return loops.TensorRows([iterable], start)
    return builtins.enumerate(iterable, start)


def zip_(*iterables):
    """`zip(...)`: of tensors (one of them symbolic), their rows together, for one loop node."""
    if iterables and all(isinstance(t, (Tensor, Variable)) for t in iterables) and \
            any(isinstance(t, (SymbolicTensor, Variable)) for t in iterables):
        return loops.TensorRows(iterables)
    return builtins.zip(*iterables)


def range_(*args):
    """`range(...)`: a Python range, or a TensorRange when an argument is a symbolic tensor."""
    if any(isinstance(a, (SymbolicTensor, Variable, WeakValue)) for a in args):
        return loops.TensorRange(*[a._int_tensor("range()") if isinstance(a, WeakValue) else a for a in args])
    return builtins.range(*[int(a) if isinstance(a, Tensor) else a for a in args])


def len_(x):
    """`len(x)`: a symbolic tensor's unknown size 0 as a tensor; otherwise Python's len."""
    if isinstance(x, SymbolicTensor) and x.shape and x.shape[0] is None:
        return shape_of(x)[0]
    if isinstance(x, TensorList):
        return shape_of(x.buffer)[0]
    return builtins.len(x)


def print_(*args, sep=" ", end="\n", file=None, flush=False):
    """`print(...)`: df.print when an argument holds a symbolic tensor, else Python's print."""
    if any(isinstance(v, (SymbolicTensor, TensorList, WeakValue)) for v in flatten(list(args))):
        args = [v.buffer if isinstance(v, TensorList) else _shown(v) if isinstance(v, (list, tuple, dict)) else v
                for v in args]
        return df_print(*args, sep=sep, end=end, output_stream=file)
    return builtins.print(*args, sep=sep, end=end, file=file, flush=flush)


def _shown(v):
    """Container `v` with its Python leaves as Python's print shows them there (repr: 'text'
    quoted), for df.print, which prints strings as they are."""
    if isinstance(v, (Tensor, Variable, TensorList, WeakValue)):
        return v.buffer if isinstance(v, TensorList) else v
    if isinstance(v, dict):
        return {k: _shown(e) for k, e in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_shown(e) for e in v) if type(v) in (list, tuple) else v
    return repr(v)


def assert_stmt(c, message_fn, line):
    """`assert c, message`: a check op in the graph when c is a symbolic tensor."""
    c = condition(c, "assert", line)
    if not isinstance(c, SymbolicTensor):
        if not c:
            raise AssertionError(message_fn()) if message_fn is not None else AssertionError()
        return
    from defun.runtime.ops.debug_ops import check_true    # noqa: E402 - the graph's check op
    message = "" if message_fn is None else message_fn()
    where = where_text(line)
    check_true(c, f"assertion failed at {where}" + (f": {message}" if message != "" else ""))
