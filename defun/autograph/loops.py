"""A converted `while` or `for` whose condition or iterable is a symbolic tensor: ONE
`while` node (df.while_loop) however many iterations, carrying the variables the body
assigns. A `for` over a tensor walks its rows by an index (its size may be unknown); a
`for` over `range(n)` with a tensor `n` counts. A list appended to becomes a tensor of
rows; loop variables whose sizes change get unknown sizes (df.while_loop relaxes them).
"""
import weakref

from defun.runtime import dtypes, errors
from defun.runtime.context import state
from defun.runtime.nest import flatten, pack_as
from defun.runtime.ops import math_ops
from defun.runtime.ops.array_ops import concat, stack as stack_rows, zeros
from defun.runtime.ops.base_ops import cast, shape as shape_of
from defun.runtime.ops.math_ops import reduce_min
from defun.runtime.ops.index_ops import gather
from defun.runtime.tensor import Tensor, convert_to_tensor
from defun.runtime.variables import Variable
from defun.graph.ir import Graph, unique_name
from defun import control_flow as cf
from defun.autograph.values import (RETVAL, CollectFallback, Undefined, TensorList, ProbeList, SlotList, WeakValue,
                                    condition, dynamic, dtype_of, describe, site, where_text)


COUNTERS = weakref.WeakSet()     # loop counters known to be >= 0 (of range(n), range(0, n, 2), ...)


class TensorRange:
    """`range(start, limit, delta)` with a symbolic tensor among them: drives one loop node."""

    __slots__ = ("start", "limit", "delta", "_static_delta", "counts_up_from_zero")

    def __init__(self, *args):
        if not 1 <= len(args) <= 3:
            raise TypeError(f"range expected 1 to 3 arguments, got {len(args)}")
        start, limit, delta = (0, args[0], 1) if len(args) == 1 else (tuple(args) + (1,))[:3]
        ts = [convert_to_tensor(a.read_value() if isinstance(a, Variable) else a) for a in (start, limit, delta)]
        for t in ts:
            if not t.dtype.is_integer or t.shape != ():
                raise errors.TracingError(f"range() takes integer scalars, got a {t.dtype.name}{list(t.shape)} tensor")
        dt = dtypes.int64 if any(t.dtype is dtypes.int64 for t in ts) else dtypes.int32
        self.start, self.limit, self.delta = (t if t.dtype is dt else cast(t, dt) for t in ts)
        self._static_delta = delta if isinstance(delta, int) else None
        self.counts_up_from_zero = isinstance(start, int) and start >= 0 and (self._static_delta or 0) > 0

    def __iter__(self):
        raise errors.TracingError("range() of a symbolic tensor can only drive a `for` statement of converted "
                                  "code (one loop node); use df.range(n) for a tensor of the numbers")


class TensorRows:
    """`enumerate(t)` or `zip(t, u, ...)` with symbolic tensors: the rows of each tensor at
    one index (after the index itself, for enumerate), as long as the shortest."""

    __slots__ = ("tensors", "offset")

    def __init__(self, tensors, offset=None):
        self.tensors = [t.read_value() if isinstance(t, Variable) else convert_to_tensor(t) for t in tensors]
        self.offset = offset        # enumerate's start (None: a zip)
        for t in self.tensors:
            if not t.shape:
                raise errors.TracingError(f"a for over rows was given a scalar ({t.dtype.name}[]) tensor")

    def __iter__(self):
        raise errors.TracingError("enumerate()/zip() of a symbolic tensor can only drive a `for` statement "
                                  "of converted code (one loop node)")


class _Iteration:
    """How a tensor `for` walks: its index's start, the test and step, the item per index."""

    def __init__(self, iterable):
        self.rng = iterable if isinstance(iterable, TensorRange) else None
        self.rows = None if self.rng else iterable

    def start(self):
        return self.rng.start if self.rng else convert_to_tensor(0)

    def more(self, i):
        if isinstance(self.rows, TensorRows):
            sizes = [shape_of(t)[0] for t in self.rows.tensors]
            return math_ops.less(i, sizes[0] if len(sizes) == 1 else math_ops.minimum(*sizes[:2]) if
                                 len(sizes) == 2 else reduce_min(stack_rows(sizes)))
        if not self.rng:
            return math_ops.less(i, shape_of(self.rows)[0])
        r = self.rng
        d = getattr(r, "_static_delta", None)
        up, down = math_ops.less(i, r.limit), math_ops.greater(i, r.limit)
        if d is not None:
            return up if d > 0 else down
        return math_ops.logical_or(math_ops.logical_and(math_ops.greater(r.delta, 0), up),
                                   math_ops.logical_and(math_ops.less(r.delta, 0), down))

    def item(self, i):
        if isinstance(self.rows, TensorRows):
            items = tuple(gather(t, i) for t in self.rows.tensors)
            return items if self.rows.offset is None else (i + self.rows.offset, items[0])
        if self.rng is None:
            return gather(self.rows, i)
        if self.rng.counts_up_from_zero:
            COUNTERS.add(i)         # never negative: x[i] needs no wrapping (operators.getitem)
        return i

    def step(self, i):
        return i + (self.rng.delta if self.rng else 1)


class _Count(_Iteration):
    """The iterations of a `while` that carries no variable (a counter for the node to carry)."""

    def __init__(self):
        self.rng = self.rows = None

    def more(self, i):
        return None

    def step(self, i):
        return i + 1


class _Retype(Exception):
    """A Python number entering a loop becomes a tensor of another dtype in the body."""

    def __init__(self, leaf, dtype):
        super().__init__(leaf, dtype)
        self.leaf, self.dtype = leaf, dtype


class _Carry:
    """Per variable the loop may assign: what the while node carries for it."""

    def __init__(self, entry, names, info, file, slots=False):
        self.names, self.line, self.file, self.slots = names, info[0], file, slots
        self.lines = dict(info[1])
        self.appends = set(info[2]) if len(info) > 2 else set()
        self.entry = list(entry)
        self.kinds = []          # per variable: "local", "list", "probe" or a list of per-leaf flags
        self.retyped = {}
        for name, v in zip(names, self.entry):
            if isinstance(v, Undefined):
                self.kinds.append("probe" if name == RETVAL else "local")
            elif type(v) is list and name in self.appends and (not v or all(dynamic(x) for x in v)):
                self.kinds.append("list" if v else "probe")
            else:
                self.kinds.append([dynamic(x) and not isinstance(x, Variable) for x in flatten(v)])

    def settle(self, probed):
        """Take what the probe found: a return value's type (zeros stand in on entry)."""
        for j, (name, kind) in enumerate(zip(self.names, self.kinds)):
            if kind == "probe" and name == RETVAL:
                if j not in probed or isinstance(probed[j], Undefined):
                    self.kinds[j] = "local"
                    probed.pop(j, None)
                    continue
                value = probed.pop(j)
                leaves = flatten(value)
                flags = [dynamic(x) and not isinstance(x, Variable) for x in leaves]
                self.entry[j] = pack_as(value, [_zeros_of(x) if f else x for x, f in zip(leaves, flags)]) \
                    if isinstance(value, (list, tuple, dict)) else (_zeros_of(value) if flags[0] else value)
                self.kinds[j] = flags

    def start(self, probed):
        """The carried leaves' initial tensors (`probed`: an empty appended list's (shape, dtype))."""
        out = []
        for j, (kind, v) in enumerate(zip(self.kinds, self.entry)):
            if kind in ("list", "probe") and self.slots:
                continue        # collected by the node, one value per iteration
            if kind == "probe" and j in probed:
                shape, dt = probed[j]
                out.append(zeros((0,) + tuple(d or 0 for d in shape), dt))
            elif kind == "list":
                out.append(stack_rows(v))
            elif isinstance(kind, list):
                for i, (x, f) in enumerate(zip(flatten(v), kind)):
                    if f:
                        dt = self.retyped.get((j, i))
                        out.append(x if dt is None else convert_to_tensor(x, dt))
        return out

    def with_weak(self, leaves, weak):
        """The carried `leaves` (as start() orders them) with the Python numbers put back."""
        out, k = list(leaves), 0
        for j, (kind, v) in enumerate(zip(self.kinds, self.entry)):
            if kind == "list":
                k += 1
            elif isinstance(kind, list):
                for i, f in enumerate(kind):
                    if f:
                        if (j, i) in weak:
                            out[k] = weak[(j, i)]
                        k += 1
        return out

    def weak(self):
        """{(variable, leaf): value} for the Python numbers entering as loop variables."""
        return {(j, i): x for j, (kind, v) in enumerate(zip(self.kinds, self.entry)) if isinstance(kind, list)
                for i, (x, f) in enumerate(zip(flatten(v), kind)) if f and isinstance(x, (bool, int, float, WeakValue))}

    def learn_types(self, weak, after):
        """Give each Python number entering the loop the dtype the body makes of it."""
        for (j, i), x in weak.items():
            y = flatten(after[j])[i] if not isinstance(after[j], Undefined) else None
            if isinstance(y, Variable):
                y = y.read_value()
            if isinstance(y, Tensor) and y.dtype is not convert_to_tensor(x).dtype:
                self.retyped[(j, i)] = y.dtype
            elif isinstance(y, float) and not isinstance(x, float):
                self.retyped[(j, i)] = dtypes.float32

    def state(self, leaves, probed, probing=False):
        """The variables' values in an iteration whose carried leaves are `leaves`."""
        it, values = iter(leaves), []
        for j, (name, kind, v) in enumerate(zip(self.names, self.kinds, self.entry)):
            if kind == "local":
                values.append(Undefined(name, self._local_why(name)))
            elif kind in ("list", "probe") and self.slots:
                values.append(SlotList())
            elif kind == "probe":
                values.append(TensorList(next(it)) if j in probed else ProbeList() if probing and name != RETVAL
                              else v)
            elif kind == "list":
                values.append(TensorList(next(it)))
            else:
                lv = [next(it) if f else x for x, f in zip(flatten(v), kind)]
                values.append(pack_as(v, lv) if isinstance(v, (list, tuple, dict)) else lv[0])
        return tuple(values)

    def _local_why(self, name):
        at = self.lines.get(name)
        return (f"it is assigned only inside the tensor loop at {site(self.file, self.line)}"
                f"{f' (line {at})' if at else ''}, which is traced once as one loop node; give it a value "
                f"before the loop to carry it through the iterations and use it after")

    def leaves(self, new, probed):
        """The carried leaves of the state `new` after one iteration, checked against entry."""
        out, collected = [], []
        for j, (name, kind, v, w) in enumerate(zip(self.names, self.kinds, self.entry, new)):
            if kind in ("list", "probe") and self.slots:
                if not isinstance(w, SlotList) or w.value is None:
                    raise CollectFallback()
                collected.append(w.value)
                continue
            if kind == "local" or (kind == "probe" and j not in probed):
                continue
            if kind in ("list", "probe"):
                if not isinstance(w, TensorList):
                    raise self._error(name, f"is a list appended to before the loop, but {describe(w)} "
                                            f"after an iteration")
                out.append(w.buffer)
                continue
            if cf._structure(v) != cf._structure(w):
                raise self._error(name, f"does not have the same nested structure before the loop "
                                        f"({cf._describe(v)}) and after an iteration ({cf._describe(w)})")
            for i, (x, y, f) in enumerate(zip(flatten(v), flatten(w), kind)):
                if not f:
                    if x is not y:
                        raise self._error(name, f"is {describe(x)} before the loop, but {describe(y)} after an "
                                                f"iteration", "the same Python value, or tensors (or numbers), "
                                                f"which are what a tensor loop carries")
                    continue
                out.append(self._checked(name, x, y, (j, i)))
        return out + collected

    def collected(self):
        return sum(1 for kind in self.kinds if kind in ("list", "probe")) if self.slots else 0

    def _checked(self, name, x, y, position):
        if isinstance(y, Undefined):
            if y.whole:
                y.fail()
            raise self._error(name, "is defined before the loop but not after an iteration")
        if not dynamic(y) and not isinstance(y, Variable):
            raise self._error(name, f"is {describe(x)} before the loop, but {describe(y)} after an iteration")
        dx, dy = self.retyped.get(position) or dtype_of(x), dtype_of(y)
        if dy is not None and dx is not None and dx is not dy:
            raise self._error(name, f"has dtype {dx.name} before the loop, but dtype {dy.name} after an iteration",
                              "the same dtype "
                                    "(use df.cast)")
        if dx is None and dy is not None and position not in self.retyped and dy is not convert_to_tensor(x).dtype:
            raise _Retype(position, dy)
        rx, ry = getattr(x, "shape", None), getattr(y, "shape", None)
        if rx is not None and ry is not None and len(rx) != len(ry):
            raise self._error(name, f"has rank {len(rx)} before the loop, but rank {len(ry)} after an iteration",
                              "the same rank")
        return y

    def final(self, out, probed, stacks=()):
        """The variables after the loop, from the while node's outputs (`stacks`: the
        values each collecting list stacked, one row per iteration)."""
        values, stacks = list(self.state(out, probed)), iter(stacks)
        for j, v in enumerate(values):
            if isinstance(v, TensorList):
                values[j] = v.buffer
            elif isinstance(v, SlotList):
                rows = next(stacks)
                values[j] = concat([stack_rows(self.entry[j]), rows], 0) if self.entry[j] else rows
        return tuple(values)

    def _error(self, name, how, need="the same structure and kind"):
        at = self.lines.get(name)
        return errors.TracingError(
            f"{name!r} {how} (the tensor loop at {site(self.file, self.line)}"
            f"{f'; assigned at line {at}' if at else ''}); every iteration must give it {need}")


def tensor_loop(test, body, get_state, set_state, names, info, iterable, stack):
    """One while node for a converted loop (`iterable`: None for a `while`, else a symbolic
    tensor, TensorRange or TensorRows); the variables take their values after it. A list
    appended to once per iteration is stacked by the node; other appends grow a tensor."""
    file = where_text(info[0]).rsplit(":", 1)[0]
    entry = get_state()
    walk = _Iteration(iterable) if iterable is not None else None
    if info[2:] and info[2]:        # lists appended to: try stacking one value per iteration
        try:
            return _loop(test, body, set_state, get_state, info, walk, stack, _Carry(entry, names, info, file, True))
        except CollectFallback:
            set_state(entry)
    return _loop(test, body, set_state, get_state, info, walk, stack, _Carry(entry, names, info, file))


def _loop(test, body, set_state, get_state, info, walk, stack, carry):
    k0 = 1 if walk else 0

    def loop_cond(*vals):
        set_state(carry.state(vals[k0:], probed))
        more = walk.more(vals[0]) if walk else None
        if test is None:
            return more
        c = condition(test(), "while" if walk is None else "for", info[0])
        if more is None:
            return c
        return more if c is True else math_ops.logical_and(more, c if isinstance(c, Tensor) else bool(c))

    def loop_body(*vals, probing=False):
        stack.append(True)
        try:
            set_state(carry.state(vals[k0:], probed, probing))
            if walk and not isinstance(walk, _Count):
                body(walk.item(vals[0]))
            else:
                body()
            new = get_state()
        finally:
            stack.pop()
        if probing:
            return None
        return ([walk.step(vals[0])] if walk else []) + carry.leaves(new, probed)

    probed = {}
    if "probe" in carry.kinds or carry.weak():
        probed = _probe(carry, loop_body, walk, probed, get_state)
        carry.settle(probed)
    while True:
        init = ([walk.start()] if walk else []) + carry.start(probed)
        if not init:        # a loop whose only effects are ops (variable updates): count
            walk, k0, init = _Count(), 1, [convert_to_tensor(0)]
        try:
            out, stacks = cf.collecting_while_loop(loop_cond, loop_body, init, carry.collected())
            break
        except _Retype as r:
            carry.retyped[r.leaf] = r.dtype
    set_state(carry.final(list(out)[k0:], probed, stacks))


def _probe(carry, loop_body, walk, probed, get_state):
    """The body traced once into a graph that is then dropped, to learn what the loop
    carries: {variable: (shape, dtype) of a row} for each empty list the body appends to,
    {variable: its value} for a return value; the dtype the body makes of each Python
    number entering (carry.learn_types). Python numbers enter this trace as themselves."""
    weak = carry.weak()
    g = Graph(unique_name("autograph_probe"), outer=state.graph, base_name="autograph_probe")
    with g.building():
        init = ([walk.start()] if walk else []) + carry.start(probed)
        ph = [g.placeholder(t.shape, t.dtype) for t in (convert_to_tensor(x) for x in init)]
        ph = ph[:1] + carry.with_weak(ph[1:], weak) if walk else carry.with_weak(ph, weak)
        lists = {}
        original = carry.state

        def state_with_probes(leaves, probed_now, probing=False):
            values = original(leaves, probed_now, probing)
            for j, v in enumerate(values):
                if isinstance(v, ProbeList):
                    lists[j] = v
            return values
        carry.state = state_with_probes
        try:
            loop_body(*ph, probing=True)
            after = get_state()
        finally:
            carry.state = original
    carry.learn_types(weak, after)
    found = {j: p.spec for j, p in lists.items() if p.spec is not None}
    for j, name in enumerate(carry.names):
        if carry.kinds[j] == "probe" and name == RETVAL:
            found[j] = after[j]
    return found


def _zeros_of(x):
    """A stand-in for a return value before the loop returns it (never read)."""
    if isinstance(x, (Tensor, Variable)):
        return zeros(tuple(d or 0 for d in x.shape), x.dtype)
    return x

