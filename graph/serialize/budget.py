"""Run-time budgets of loaded documents: the memory a call holds, loop iterations, operations.

A small document can describe a huge computation (`zeros` of 2**28 float64, `tile` by
2**28, a `while` whose condition never turns false, calls nested 60 deep that double at
each level). So a loaded function runs on a backend of its own, `BudgetBackend`: numpy's
kernels, each wrapped by the document's `Meter` to keep the call within

- `max_bytes`: the values the call has computed and still holds (arguments, constants and
  variables not counted), plus what the running kernel uses inside, never exceed it.
  Before a kernel runs, its output size is known from the node's static shapes, or from
  its op's shape inference on the actual input shapes (remembered per shape), or, for an
  output whose size depends on input values, from its row's `Cost.sized`; its scratch
  memory from its row's `Cost.scratch` (runtime/registry.py). A value past the budget is
  refused before it is allocated. After the kernel, the real sizes are counted (and
  compared with the node's declared types), and the inputs whose last use it was are
  released. A node that runs functions (call, cond, while, scan) counts what they hold
  while they run, then only its outputs.
- `max_iterations`: each run of a `while` stops with the error once its body has run that
  often and the condition still holds, and a `scan` once it has walked that many rows; the
  loop's values, and what it keeps per iteration (the history and saves of a
  differentiable loop, the values a scan stacks: twice, the rows and their stack, plus
  `ROW_BYTES` each) are counted after each iteration. This holds for the document's loops
  and for those of gradients built from them.
- `max_operations`: the work of the whole call, across its calls and loops. Each kernel
  run is charged, before it runs, `KERNEL_OPERATIONS` (its dispatch; `CALL_OPERATIONS` for
  a node running a function or a loop iteration), one per element of its inputs and
  outputs and its row's `Cost.work` and `Cost.per_element` (svd's m n min(m, n), a sort's
  n log n, print's per entry formatted, erf's 40 per element: runtime/ops/_costs.py).

All raise `errors.ResourceExhaustedError` naming the node. The counters are per thread
(`_counters`), set to zero when a loaded call starts (a loaded function called inside a
defun's trace keeps its budgets: the call node runs it on its own backend). Plans of
ordinary defuns never see any of this: they run on the numpy backend and pay nothing.

The meter is one object (`Meter`: the limits and the checks) with its wrappers: the
static-size one, for the common node (one array result of a size known when compiling:
a few attribute reads and two comparisons), the run-time-size one for every other, and
the region one for a backend that fuses nodes (numba: `BudgetBackend(base=)` keeps its
partition, and each region is metered where it starts, its nodes' sizes inferred from its
input shapes and charged as numpy's kernels would be). The module is long because the
meter, its wrappers and the backend installing them are one mechanism.
"""
import math
import threading

import numpy as np

from defun.runtime import dtypes, errors
from defun.graph.backends import NumpyBackend, Region
from defun.graph.while_op import _effective_body as effective_body, _num_loop_vars as num_loop_vars
from defun.graph.executor import Plan
from defun.graph.functions import plan_of

__all__ = ["BudgetBackend", "Meter", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_ITERATIONS",
           "DEFAULT_MAX_OPERATIONS", "KERNEL_OPERATIONS", "CALL_OPERATIONS", "start_call", "end_call"]

DEFAULT_MAX_BYTES = 1 << 30          # 1 GiB held at once by one call
DEFAULT_MAX_ITERATIONS = 100_000     # per run of one while loop
DEFAULT_MAX_OPERATIONS = 10 ** 10    # per call: some seconds of numpy's work
KERNEL_OPERATIONS = 5_000            # charged per kernel run (its dispatch: microseconds)
CALL_OPERATIONS = 50_000             # per run of a function (call, branch, loop body)
ROW_BYTES = 120                      # a kept value's array object and list slot, per iteration
_PREDICTIONS_KEPT = 64               # output sizes remembered per node (by input shapes)
_INF = float("inf")


class _Counters(threading.local):
    live = 0         # bytes held by values the running loaded call computed
    operations = 0   # operations it has been charged
    loops = None     # the running loops: [[base bytes, iterations, bytes kept, node]]


_counters = _Counters()


def start_call():
    """Zero the thread's counters for a loaded call; returns what `end_call` restores."""
    c = _counters
    saved = (c.live, c.operations)
    c.live = c.operations = 0
    return saved


def end_call(saved):
    _counters.live, _counters.operations = saved


def _nbytes(v):
    return v.nbytes if isinstance(v, (np.ndarray, np.generic)) else 0


def _shape_of(t):
    """A tensor's shape as a tuple with None for unknown sizes; () for a resource."""
    return () if t.dtype is dtypes.resource else tuple(t.shape)


def _size(shape):
    return math.prod(shape)


def _static_bytes(tensors):
    """Bytes of `tensors` when every shape is fully known (resources count 0), else None."""
    if len(tensors) == 1:       # the common case, without the loop
        t = tensors[0]
        if t.dtype is dtypes.resource:
            return 0
        shape = tuple(t.shape)
        return None if None in shape else math.prod(shape) * t.dtype.np.itemsize
    total = 0
    for t in tensors:
        if t.dtype is dtypes.resource:
            continue
        shape = tuple(t.shape)
        if None in shape:
            return None
        total += math.prod(shape) * t.dtype.np.itemsize
    return total


def _costs(node, shapes, out_types):
    """(scratch bytes, operations) of running `node` on inputs of `shapes` with outputs of
    `out_types` [(shape, DType)] (all known): its row's Cost, plus one operation per element
    of its inputs and outputs and the dispatch."""
    cost = node.op.cost
    attrs = node.attrs
    if cost.work is not None or callable(cost.scratch) or cost.scratch_bytes is not None:
        attrs = {**node.op.defaults, **attrs}     # a cost reads every attr (a document may omit defaults)
    out_shapes = [s for s, _ in out_types]
    itemsize = out_types[0][1].np.itemsize if out_types else 1
    scratch = cost.scratch
    if callable(scratch):
        scratch = scratch(shapes, out_shapes, attrs) * itemsize
    elif scratch:
        largest = [_size(s) * d.np.itemsize for s, d in out_types]
        largest += [_size(s) * t.dtype.np.itemsize for s, t in zip(shapes, node.inputs)
                    if t.dtype is not dtypes.resource]
        scratch = int(scratch * max(largest, default=0))
    if cost.scratch_bytes is not None:
        scratch += cost.scratch_bytes(shapes, out_shapes, attrs)
    work = (CALL_OPERATIONS if node.op.function_attrs else KERNEL_OPERATIONS) + \
        sum(_size(s) for s in shapes) + sum(_size(s) for s in out_shapes)
    if cost.per_element and out_types:
        work += sum(_size(s) * cost.heavy(d.np.kind) for s, d in out_types)
    if cost.work is not None:
        work += cost.work(shapes, out_shapes, attrs)
    return int(scratch), int(work)


class Meter:
    """A loaded document's budgets and the checks its kernels make against the running
    thread's counters; `static` and `sized` wrap a kernel to make them."""

    __slots__ = ("max_bytes", "max_iterations", "max_operations", "limit", "op_limit")

    def __init__(self, max_bytes, max_iterations, max_operations):
        self.max_bytes, self.max_iterations, self.max_operations = max_bytes, max_iterations, max_operations
        self.limit = max_bytes if max_bytes is not None else _INF
        self.op_limit = max_operations if max_operations is not None else _INF

    # -- the checks
    def too_much(self, node, need, held):
        return errors.ResourceExhaustedError(
            f"{_label(node)}: its result needs {need} bytes and the call already holds {held}, more "
            f"than the budget of {self.max_bytes} bytes; load the document with a larger max_bytes= "
            f"if you trust it")

    def too_many(self, node, done):
        return errors.ResourceExhaustedError(
            f"{_label(node)}: the call would reach {done} operations, past the budget of "
            f"max_operations={self.max_operations}; load the document with a larger "
            f"max_operations= if you trust it")

    def charge(self, node, work):
        """Count `work` operations for `node` before it runs, or raise."""
        done = _counters.operations + work
        if done > self.op_limit:
            raise self.too_many(node, done)
        _counters.operations = done

    # -- the static-size wrapper
    def static(self, node, fn, dying, static, scratch, work, unknown):
        """`fn` keeping the meter for a node of one array result of `static` bytes known when
        compiling, using `scratch` bytes inside, charged `work` operations plus the elements
        of the inputs at positions `unknown` (sizes not known when compiling). It hands
        every argument on to the kernel (an `out` array after the inputs too)."""
        counters, limit, op_limit = _counters, self.limit, self.op_limit
        t = node.outputs[0]
        shape, dtype = tuple(t.shape), t.dtype.np
        room, need = limit - static - scratch, static + scratch
        first = dying[0] if len(dying) == 1 else None
        meter = self

        def run_static(*args, **kw):
            base = counters.live
            if base > room:
                raise meter.too_much(node, need, base)
            done = counters.operations + work
            if unknown:
                done += sum([args[i].size for i in unknown])
            if done > op_limit:
                raise meter.too_many(node, done)
            counters.operations = done
            result = fn(*args, **kw)
            if result.shape != shape or result.dtype != dtype:
                _check_outputs(node, [(dtype, shape)], (result,))
            if first is not None:
                counters.live = base + static - args[first].nbytes
            elif dying:
                counters.live = base + static - sum(args[i].nbytes for i in dying)
            else:
                counters.live = base + static
            return result
        return run_static

    # -- the run-time-size wrapper
    def sized(self, node, fn, dying, predict, loop=None):
        """`fn` keeping the meter for any node: its sizes, scratch and work from
        `predict(args)` -> (bytes or None if unknown, scratch bytes, operations) before it
        runs, its results checked against the declared types and counted after. `loop`:
        the runner of a while node (which counts its iterations)."""
        counters, limit, op_limit, meter = _counters, self.limit, self.op_limit, self
        declared = [(np.dtype(t.dtype.np), tuple(t.shape)) for t in node.outputs if t.dtype is not dtypes.resource]
        single = node.op.single
        charge_outputs = not node.op.function_attrs   # what a function computes, its own kernels charged
        if single and declared:    # one array result: its type checked inline, the common case
            dtype, shape = declared[0]
            rank, known = len(shape), tuple((i, d) for i, d in enumerate(shape) if d is not None)
        else:
            dtype = rank = known = None

        def run_sized(*args, **kw):
            base = counters.live
            need, scratch, work = predict(args)
            if need is not None and base + need + scratch > limit:
                raise meter.too_much(node, need + scratch, base)
            done = counters.operations + work
            if done > op_limit:
                raise meter.too_many(node, done)
            counters.operations = done
            if loop is not None:
                result = loop(node, fn, base, args, kw)
            else:
                result = fn(*args, **kw)
            if dtype is not None and result.dtype == dtype and len(result.shape) == rank and \
                    all([result.shape[i] == d for i, d in known]):
                got, elements = result.nbytes, result.size
            else:
                got, elements = _check_outputs(node, declared, (result,) if single else (result or ()), True)
            if got > limit - base:
                raise meter.too_much(node, got, base)
            if charge_outputs and need is None:
                meter.charge(node, elements)
            counters.live = base + got - sum(args[i].nbytes for i in dying) if dying else base + got
            return result
        return run_sized

    # -- the compiled-region wrapper (a backend fusing nodes: numba)
    def region(self, region, dying, predict):
        """`region`'s kernel keeping the meter at its boundary: its outputs' bytes, the
        scratch and the work of its nodes predicted from its input shapes before it runs
        (`predict(args)`, as `sized`'s), its results counted after."""
        counters, limit, op_limit, meter, fn = _counters, self.limit, self.op_limit, self, region.kernel
        label = "fused(" + ", ".join(dict.fromkeys(n.op.name for n in region.nodes)) + ")"

        def run_region(*args):
            base = counters.live
            need, scratch, work = predict(args)
            if base + need + scratch > limit:
                raise meter.too_much(label, need + scratch, base)
            done = counters.operations + work
            if done > op_limit:
                raise meter.too_many(label, done)
            counters.operations = done
            result = fn(*args)
            got = sum([_nbytes(v) for v in result])
            if got > limit - base:
                raise meter.too_much(label, got, base)
            counters.live = base + got - sum([args[i].nbytes for i in dying]) if dying else base + got
            return result
        return run_region

    # -- loops
    def run_loop(self, node, fn, base, args, kw):
        loops = _counters.loops
        if loops is None:
            loops = _counters.loops = []
        loops.append([base, 0, 0, node])
        try:
            return fn(*args, **kw)
        finally:
            loops.pop()

    def iterate(self, frame, what):
        """One more iteration of the innermost running loop `frame` (a `while` or a `scan`),
        before it runs: counted against max_iterations and charged."""
        frame[1] += 1
        if self.max_iterations is not None and frame[1] > self.max_iterations:
            raise errors.ResourceExhaustedError(
                _TOO_MANY[what].format(self.max_iterations) + f"; the budget is max_iterations="
                f"{self.max_iterations} (load the document with a larger max_iterations= if you "
                f"trust it)")
        self.charge(frame[3], CALL_OPERATIONS)

    def hold(self, frame, held, kept):
        """After an iteration of loop `frame`: its values `held` bytes, the values it keeps
        for the end (stacked there: counted twice) `kept` bytes more; checked against max_bytes."""
        frame[2] += kept
        live = frame[0] + held + 2 * frame[2]
        if live > self.limit:
            raise self.too_much(frame[3], live - frame[0], frame[0])
        _counters.live = live

    def counting_body(self, plan, n):
        """`plan` (of a while body returning its `n` loop values, then the values the loop
        keeps per iteration) counting the iterations and their operations before each run,
        and the loop's values and all it has kept after."""
        meter, inner = self, plan.run

        def run(*args):
            loops = _counters.loops
            if not loops:
                return inner(*args)
            frame = loops[-1]
            meter.iterate(frame, "while")
            out = inner(*args)
            meter.hold(frame, sum(_nbytes(v) for v in out[:n]),
                       sum(_nbytes(v) for v in out[n:]) + ROW_BYTES * (len(out) - n))
            return out
        return _replacing_run(plan, run)

    def counting_rows(self, plan, carries):
        """`plan` (of a scan body) counting the rows, their operations and the values the
        innermost running scan carries and stacks after each row."""
        meter, inner = self, plan.run

        def run(*args):
            loops = _counters.loops
            if not loops:
                return inner(*args)
            frame = loops[-1]
            meter.iterate(frame, "scan")
            out = inner(*args)
            meter.hold(frame, sum(_nbytes(v) for v in out[:carries]),     # kept: stacked at the end
                       sum(_nbytes(v) for v in out[carries:]) + ROW_BYTES * (len(out) - carries))
            return out
        return _replacing_run(plan, run)


def _label(node):
    """What a refusal names: the node's op, or the region's description (a str)."""
    return node if isinstance(node, str) else node.op.name


_TOO_MANY = {"while": "while: {} iterations and the condition still holds",
             "scan": "scan: more than {} rows"}


def _replacing_run(plan, run):
    """A Plan like `plan` whose run is `run`."""
    wrapped = Plan()
    wrapped.run, wrapped.source, wrapped.graph = run, plan.source, plan.graph
    wrapped.backend, wrapped.num_inputs, wrapped.num_outputs = plan.backend, plan.num_inputs, plan.num_outputs
    return wrapped


class BudgetBackend(NumpyBackend):
    """numpy's kernels wrapped to keep a loaded call within `max_bytes`, `max_iterations`
    and `max_operations` (None: no limit). One per loaded document; its plans are cached
    under `name` in that document's graphs, which carry it (`derived.budget`) so that a
    call of them from another graph runs here too."""

    name = "loaded"

    def __init__(self, max_bytes=DEFAULT_MAX_BYTES, max_iterations=DEFAULT_MAX_ITERATIONS,
                 max_operations=DEFAULT_MAX_OPERATIONS, base=None):
        self.meter = Meter(max_bytes, max_iterations, max_operations)
        # the backend whose partition this one keeps (numba's regions, each metered where it
        # starts); its single nodes run numpy's kernels, wrapped here
        self.base = base if base is not None and base.name != "numpy" else None
        self._dying = {}     # id(node) -> input positions whose values die at the node
        self._outable = set()    # id(node): the numpy backend would let it write over an input
        self._positional = set()  # id(node): ... taking it positionally (a ufunc, run_static)
        self._counting = set()   # ids of the loop body plans that count iterations
        # (id(kernel), op, bytes, scratch, work, unknown, shape, id(DType), dying) -> (kernel,
        # its static-size wrapper): nodes alike share one wrapper (a chain of tanh nodes: one),
        # which is made once and gives the plan one name to compile instead of one per node
        self._static_wrappers = {}

    @property
    def max_bytes(self):
        return self.meter.max_bytes

    @property
    def max_iterations(self):
        return self.meter.max_iterations

    @property
    def max_operations(self):
        return self.meter.max_operations

    def runner(self, graph):
        """What a `call` node of another graph runs for `graph` (one of this document's): its
        plan here, within this document's budgets, counted from zero (graph/functions.py)."""
        plan = plan_of(graph, self)

        def run(*args):
            saved = start_call()
            try:
                return plan.run(*args)
            finally:
                end_call(saved)
        return run

    def partition(self, nodes, outputs):
        """numpy's steps (one per node); notes which inputs each node reads for the last time
        among the values the plan computes (not its inputs, constants or outputs)."""
        made = {id(t) for n in nodes if n.op.name not in ("placeholder", "const") for t in n.outputs}
        made.difference_update(id(t) for t in outputs)
        last = {}
        for n in nodes:
            for t in n.inputs:
                if id(t) in made:
                    last[id(t)] = n
        dying_at = self._dying      # only nodes where some value dies get an entry
        for n in nodes:
            inputs = n.inputs
            if len(inputs) == 1:    # the common case, without the repeats check
                if last.get(id(inputs[0])) is n:
                    dying_at[id(n)] = (0,)
                continue
            seen, dying = set(), []
            for i, t in enumerate(inputs):
                if last.get(id(t)) is n and id(t) not in seen:
                    dying.append(i)
                seen.add(id(t))
            if dying:
                dying_at[id(n)] = tuple(dying)
        if self.base is None:
            return super().partition(nodes, outputs)
        return [self._metered(s, last) if isinstance(s, Region) else s
                for s in self.base.partition(nodes, outputs)]

    def _metered(self, region, last):
        """`region` with its kernel keeping the meter (the inputs whose last reader is in it
        die there)."""
        inside = {id(n) for n in region.nodes}
        for n in region.nodes:
            self._dying.pop(id(n), None)
        dying = tuple(i for i, t in enumerate(region.inputs)
                      if id(last.get(id(t))) in inside and t.dtype is not dtypes.resource)
        kernel = self.meter.region(region, dying, _RegionPrediction(region))
        return Region(region.nodes, region.inputs, region.outputs, kernel, region.name)

    def kernel(self, node):
        if node.op.name == "while":     # before binding: the runner takes the body's plan
            self._count_iterations(node.attrs)
        elif node.op.name == "scan":
            self._count_rows(node.attrs["body"], node.attrs["carries"])
        fn, pass_attrs = NumpyBackend.kernel(self, node)
        wrapped, static = self._wrap(node, fn)
        if NumpyBackend.writes_out(self, node, fn):
            self._outable.add(id(node))
            if static and NumpyBackend.out_positional(self, node, fn):
                self._positional.add(id(node))
        return wrapped, pass_attrs

    def writes_out(self, node, fn):
        return id(node) in self._outable

    def out_positional(self, node, fn):
        return id(node) in self._positional

    def _wrap(self, node, fn):
        """(the kernel keeping the meter, True if that is the static-size wrapper, which
        passes every argument on)."""
        dying = self._dying.pop(id(node), ())
        if dying:
            dying = tuple(i for i in dying if node.inputs[i].dtype is not dtypes.resource)
        op, outs = node.op, node.outputs
        static = _static_bytes(outs)
        shapes = [_shape_of(t) for t in node.inputs]
        unknown = [i for i, s in enumerate(shapes) if None in s]    # input sizes known at run time
        cost = op.cost
        costly_unknown = unknown and (cost.scratch or cost.work or cost.scratch_bytes)
        if static is not None and op.single and not op.function_attrs and cost.sized is None and \
                outs[0].dtype is not dtypes.resource and not costly_unknown:
            t = outs[0]
            bare = [(0,) if i in unknown else s for i, s in enumerate(shapes)]   # counted when run
            scratch, work = _costs(node, bare, [(tuple(t.shape), t.dtype)])
            key = (id(fn), op, static, scratch, work, tuple(unknown), tuple(t.shape), id(t.dtype), dying)
            found = self._static_wrappers.get(key)
            if found is not None:
                return found[1], True     # its messages name the op, as they would for this node
            wrapped = self.meter.static(node, fn, dying, static, scratch, work, tuple(unknown))
            self._static_wrappers[key] = (fn, wrapped)
            return wrapped, True
        if static is not None and not unknown and cost.sized is None:
            fixed = (static,) + _costs(node, shapes, [(tuple(t.shape), t.dtype) for t in outs
                                                      if t.dtype is not dtypes.resource])

            def predict(args):
                return fixed
        else:
            predict = _Prediction(node)
        loop = self.meter.run_loop if op.name in ("while", "scan") else None
        return self.meter.sized(node, fn, dying, predict, loop), False

    def _count_iterations(self, attrs):
        """Make the plan of the body a while node of `attrs` runs (with what it keeps per
        iteration: control_flow.effective_body; compiled for this backend once) count."""
        body = effective_body(attrs)
        plan = plan_of(body, self)
        if id(plan) not in self._counting:
            plan = self.meter.counting_body(plan, num_loop_vars(attrs))
            self._counting.add(id(plan))
            body.derived.plans[self.name] = plan

    def _count_rows(self, body, carries):
        """Make the plan of scan body `body` count its rows and the values the scan stacks."""
        plan = plan_of(body, self)
        if id(plan) not in self._counting:
            plan = self.meter.counting_rows(plan, carries)
            self._counting.add(id(plan))
            body.derived.plans[self.name] = plan


class _Prediction:
    """(output bytes or None if unknown, scratch bytes, operations) of a node from its input
    shapes (its op's inference and Cost, remembered per shape), or, for an op whose row
    declares `Cost.sized`, from its input values."""

    __slots__ = ("node", "known", "dts", "sized", "base")

    def __init__(self, node):
        self.node = node
        self.known = {}
        self.dts = [t.dtype for t in node.inputs]
        self.sized = node.op.cost.sized
        self.base = CALL_OPERATIONS if node.op.function_attrs else KERNEL_OPERATIONS

    def __call__(self, args):
        if self.sized is not None:
            return self._by_value(args)
        try:     # the shapes of the inputs (a resource handle's shape is the variable's)
            key = args[0].shape if len(args) == 1 else tuple([a.shape for a in args])
        except AttributeError:
            key = tuple([a.shape if isinstance(a, (np.ndarray, np.generic)) else () for a in args])
        need = self.known.get(key)
        if need is None:
            if len(self.known) >= _PREDICTIONS_KEPT:
                self.known.clear()
            need = self.known[key] = self._infer(key)
        return need

    def _by_value(self, args):
        node = self.node
        arrays = [a for a in args[:len(node.inputs)] if isinstance(a, (np.ndarray, np.generic))]
        need = int(self.sized(args, node.attrs))
        itemsize = node.outputs[0].dtype.np.itemsize if node.outputs else 1
        scratch = node.op.cost.scratch
        scratch = int(scratch * max([need] + [a.nbytes for a in arrays])) if scratch and not callable(scratch) else 0
        return need, scratch, self.base + sum(a.size for a in arrays) + need // itemsize

    def _infer(self, key):
        node = self.node
        shapes = [key] if len(node.inputs) == 1 else list(key)
        shapes = [() if t.dtype is dtypes.resource else tuple(s) for s, t in zip(shapes, node.inputs)]
        unknown = (None, 0, self.base + sum(_size(s) for s in shapes))
        try:
            types = node.op.infer(shapes, self.dts, node.attrs)
        except Exception:   # the kernel will say what is wrong, naming the node
            return unknown
        types = [(tuple(s), d) for s, d in types if d is not dtypes.resource]
        if any(None in s for s, _ in types):
            return unknown
        total = sum(_size(s) * d.np.itemsize for s, d in types)
        return (total,) + _costs(node, shapes, types)


class _RegionPrediction:
    """(output bytes, scratch bytes, operations) of a compiled region from its input shapes,
    remembered per shape: its nodes' shapes inferred in order, each charged as numpy would
    charge it (the same document costs the same on either backend); scratch: twice the
    largest value inside it that is not an output (a stage's buffer; a node's input and
    output where the region runs on numpy's kernels instead), or a node's own."""

    __slots__ = ("region", "known")

    def __init__(self, region):
        self.region, self.known = region, {}

    def __call__(self, args):
        key = tuple([a.shape if isinstance(a, (np.ndarray, np.generic)) else () for a in args])
        got = self.known.get(key)
        if got is None:
            if len(self.known) >= _PREDICTIONS_KEPT:
                self.known.clear()
            got = self.known[key] = self._infer(key)
        return got

    def _infer(self, key):
        region = self.region
        shapes = {id(t): tuple(s) for t, s in zip(region.inputs, key)}
        # an upper bound for a size inference cannot give: the inputs broadcast together
        rank = max([len(s) for s in key], default=0)
        bound = math.prod(max([s[len(s) - rank + k] for s in key if len(s) - rank + k >= 0], default=1)
                          for k in range(rank))
        outputs = {id(t) for t in region.outputs}
        need = inner = scratch = 0
        work = KERNEL_OPERATIONS
        for n in region.nodes:
            ins = [shapes.get(id(t)) or _static_shape(t, bound) for t in n.inputs]
            try:
                types = [(tuple(s), d) for s, d in n.op.infer(ins, [t.dtype for t in n.inputs], n.attrs)]
            except Exception:       # the kernel will say what is wrong
                types = []
            types = [(s if None not in s else (bound,), d) for s, d in types] or \
                [((bound,), t.dtype) for t in n.outputs]
            s_, w_ = _costs(n, ins, types)
            scratch, work = max(scratch, s_), work + w_ - KERNEL_OPERATIONS
            for t, (s, d) in zip(n.outputs, types):
                shapes[id(t)] = s
                nbytes = _size(s) * d.np.itemsize
                if id(t) in outputs:
                    need += nbytes
                else:
                    inner = max(inner, nbytes)
        return need, scratch + 2 * inner, work


def _static_shape(t, bound):
    """A tensor's shape when no input of the region gives it: a constant's, else its static
    shape with `bound` for unknown sizes."""
    if t.node.op.name == "const":
        return tuple(np.shape(t.node.attrs["value"]))
    return tuple(bound if d is None else d for d in t.shape)


def _check_outputs(node, declared, results, count=False):
    """Bytes of a node's results (and their elements, if `count`), which must have the types
    the document declares for it (a kernel that disagrees with its op's inference is
    stopped at the node)."""
    total = elements = 0
    k = 0
    for v in results:
        if not isinstance(v, (np.ndarray, np.generic)):
            continue    # a resource handle
        want_dtype, want_shape = declared[k]
        k += 1
        shape = v.shape
        if v.dtype != want_dtype or len(shape) != len(want_shape) or \
                any(w is not None and w != s for s, w in zip(shape, want_shape)):
            raise errors.InvalidArgumentError(
                f"{node.op.name} computed {dtypes.from_numpy(v.dtype).name}{list(shape)} where the "
                f"document declares {dtypes.from_numpy(want_dtype).name}"
                f"{[w for w in want_shape]}: its attrs or inputs are ones its kernel treats "
                f"differently from its shape inference")
        total += v.nbytes
        elements += v.size
    return (total, elements) if count else total
