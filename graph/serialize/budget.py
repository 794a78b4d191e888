"""Run-time budgets of loaded documents: the memory a call's values may hold, loop iterations.

A small document can describe a huge computation (`zeros` of 2**28 float64, `tile` by
2**28, a `while` whose condition never turns false). So a loaded function runs on a backend
of its own, `BudgetBackend`: numpy's kernels, each wrapped to keep the call within

- `max_bytes`: the values the call has computed and still holds (arguments, constants and
  variables not counted) never exceed it. Before a kernel runs, its output size is known
  from the node's static shapes, or from its op's shape inference on the actual input
  shapes (remembered per shape), or, for an output whose size depends on input values,
  from the op's row in `_VALUE_SIZED`; a value past the budget is refused before it is
  allocated. After the kernel, the real sizes are counted (and compared with the node's
  declared types), and the inputs whose last use it was are released. A node that runs
  functions (call, cond, while, scan) counts what they hold while they run, then only its
  outputs.
- `max_iterations`: each run of a `while` stops with the error once its body has run that
  often and the condition still holds, and a `scan` once it has walked that many rows; the
  loop's values (and the history a differentiable loop keeps, the values a scan stacks)
  are counted per iteration. This holds for the document's
  loops and for those of gradients built from them.

Both raise `errors.ResourceExhaustedError`. The accounting is per thread (`_meter`), set
to zero when a loaded call starts. Plans of ordinary defuns never see any of this: they
run on the numpy backend and pay nothing. Kernel-internal temporaries are not counted.
"""
import math
import threading

import numpy as np

from defun.runtime import dtypes, errors
from defun.graph.backends import NumpyBackend
from defun.graph.executor import Plan
from defun.graph.functions import plan_of

__all__ = ["BudgetBackend", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_ITERATIONS", "start_call", "end_call"]

DEFAULT_MAX_BYTES = 1 << 30          # 1 GiB held at once by one call
DEFAULT_MAX_ITERATIONS = 100_000     # per run of one while loop
_PREDICTIONS_KEPT = 64               # output sizes remembered per node (by input shapes)


class _Meter(threading.local):
    live = 0        # bytes held by values the running loaded call computed
    loops = None    # the running while loops: [[base bytes, iterations, history bytes, node, keeps history]]


_meter = _Meter()


def start_call():
    """Zero the thread's meter for a loaded call; returns what `end_call` restores."""
    saved = _meter.live
    _meter.live = 0
    return saved


def end_call(saved):
    _meter.live = saved


def _nbytes(v):
    return v.nbytes if isinstance(v, (np.ndarray, np.generic)) else 0


_INF = float("inf")


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


def _segment_sum_bytes(args, node):
    data, ids = args[0], args[1]
    rows = int(ids.max()) + 1 if ids.size else 0
    return max(rows, 0) * int(np.prod(data.shape[ids.ndim:], dtype=np.int64)) * data.dtype.itemsize


# Ops whose output size depends on input values, not only on shapes: the bytes a kernel is
# about to allocate, from its input values (a new op of this kind adds its row here).
_VALUE_SIZED = {"segment_sum": _segment_sum_bytes}


def _refuse(node, need, held, limit):
    return errors.ResourceExhaustedError(
        f"{node.op.name}: its result needs {need} bytes and the call already holds {held}, more "
        f"than the budget of {limit} bytes; load the document with a larger max_bytes= if you "
        f"trust it")


class BudgetBackend(NumpyBackend):
    """numpy's kernels wrapped to keep a loaded call within `max_bytes` and `max_iterations`
    (None: no limit). One per loaded document; its plans are cached under `name` in that
    document's graphs."""

    name = "loaded"

    def __init__(self, max_bytes=DEFAULT_MAX_BYTES, max_iterations=DEFAULT_MAX_ITERATIONS):
        self.max_bytes = max_bytes
        self.max_iterations = max_iterations
        self._dying = {}     # id(node) -> input positions whose values die at the node
        self._outable = set()    # id(node): the numpy backend would let it write over an input
        self._positional = set()  # id(node): ... taking it positionally (a ufunc, run_static)
        self._counting = set()   # ids of the loop body plans that count iterations
        # (id(kernel), op, bytes, shape, id(DType), dying) -> (kernel, its static-size wrapper):
        # nodes alike share one wrapper (a chain of tanh nodes: one), which is made once and
        # gives the plan one name to compile instead of one per node
        self._static_wrappers = {}

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
        return super().partition(nodes, outputs)

    def kernel(self, node):
        if node.op.name == "while":     # before binding: the runner takes the body's plan
            self._count_iterations(node.attrs["body"])
        elif node.op.name == "scan":
            self._count_rows(node.attrs["body"], node.attrs["carries"])
        fn, pass_attrs = NumpyBackend.kernel(self, node)
        wrapped, passes_args = self._wrap(node, fn)
        if NumpyBackend.writes_out(self, node, fn):
            self._outable.add(id(node))
            if passes_args and NumpyBackend.out_positional(self, node, fn):
                self._positional.add(id(node))
        return wrapped, pass_attrs

    def writes_out(self, node, fn):
        return id(node) in self._outable

    def out_positional(self, node, fn):
        return id(node) in self._positional

    def _wrap(self, node, fn):
        """(the kernel keeping the meter, True if that is the static-size wrapper). The
        common node (one array result of a size known when compiling) gets that wrapper, of
        a few attribute reads and one comparison, which hands every argument on to the kernel
        (an `out` array after the inputs too) and reads only the inputs; the others the
        general one."""
        dying = self._dying.pop(id(node), ())
        if len(dying) == 1:
            if node.inputs[dying[0]].dtype is dtypes.resource:
                dying = ()
        elif dying:
            dying = tuple(i for i in dying if node.inputs[i].dtype is not dtypes.resource)
        outs = node.outputs
        meter = _meter
        if not outs:
            if not dying:
                return fn, False

            def run_effect(*args, **kw):
                result = fn(*args, **kw)
                meter.live -= sum(args[i].nbytes for i in dying)
                return result
            return run_effect, False
        limit = self.max_bytes if self.max_bytes is not None else _INF
        static = _static_bytes(outs)
        t = outs[0]
        if static is not None and node.op.single and not node.op.function_attrs and t.dtype is not dtypes.resource:
            shape = tuple(t.shape)
            key = (id(fn), node.op, static, shape, id(t.dtype), dying)   # DTypes: singletons
            known = self._static_wrappers.get(key)
            if known is not None:
                return known[1], True     # its messages name the op, as they would for this node
            room, dtype = limit - static, t.dtype.np
            first = dying[0] if len(dying) == 1 else None

            def run_static(*args, **kw):
                base = meter.live
                if base > room:
                    raise _refuse(node, static, base, limit)
                result = fn(*args, **kw)
                if result.shape != shape or result.dtype != dtype:
                    _check_outputs(node, [(dtype, shape)], (result,))
                if first is not None:
                    meter.live = base + static - args[first].nbytes
                elif dying:
                    meter.live = base + static - sum(args[i].nbytes for i in dying)
                else:
                    meter.live = base + static
                return result
            self._static_wrappers[key] = (fn, run_static)
            return run_static, True
        declared = [(np.dtype(t.dtype.np), tuple(t.shape)) for t in outs if t.dtype is not dtypes.resource]
        predict = _Prediction(node) if static is None and not node.op.function_attrs else None
        single, loop = node.op.single, node.op.name in ("while", "scan")
        if predict is not None and single and t.dtype is not dtypes.resource:
            dtype, shape = declared[0]
            rank, known = len(shape), [(i, d) for i, d in enumerate(shape) if d is not None]

            def run_sized(*args, **kw):
                base = meter.live
                need = predict(args)
                if need is not None and base + need > limit:
                    raise _refuse(node, need, base, limit)
                result = fn(*args, **kw)
                got = result.shape
                if result.dtype != dtype or len(got) != rank or any(got[i] != d for i, d in known):
                    _check_outputs(node, declared, (result,))
                got = result.nbytes
                if got > limit - base:
                    raise _refuse(node, got, base, limit)
                meter.live = base + got - sum(args[i].nbytes for i in dying) if dying else base + got
                return result
            return run_sized, False

        def run(*args, **kw):
            base = meter.live
            need = static if predict is None else predict(args)
            if need is not None and base + need > limit:
                raise _refuse(node, need, base, limit)
            if loop:
                result = self._run_loop(node, fn, base, args, kw)
            else:
                result = fn(*args, **kw)
            got = _check_outputs(node, declared, (result,) if single else result)
            if got > limit - base:
                raise _refuse(node, got, base, limit)
            meter.live = base + got - sum(args[i].nbytes for i in dying)
            return result
        return run, False

    def _run_loop(self, node, fn, base, args, kw):
        loops = _meter.loops
        if loops is None:
            loops = _meter.loops = []
        loops.append([base, 0, 0, node, bool(node.attrs.get("history"))])
        try:
            return fn(*args, **kw)
        finally:
            loops.pop()

    def _count_iterations(self, body):
        """Make the plan of loop body `body` (compiled for this backend once) count."""
        plan = plan_of(body, self)
        if id(plan) not in self._counting:
            plan = self._loop_body(plan, len(body.outputs))
            self._counting.add(id(plan))
            body.derived.plans[self.name] = plan

    def _loop_body(self, plan, num_loop_values):
        """`plan` (of a while body) counting the iterations and the loop's memory of the
        innermost running loop before each run."""
        limit = self.max_bytes if self.max_bytes is not None else _INF
        max_iterations = self.max_iterations
        inner = plan.run

        def run(*args):
            loops = _meter.loops
            if loops:
                frame = loops[-1]
                frame[1] += 1
                if max_iterations is not None and frame[1] > max_iterations:
                    raise errors.ResourceExhaustedError(
                        f"while: {max_iterations} iterations and the condition still holds; the "
                        f"budget is max_iterations={max_iterations} (load the document with a "
                        f"larger max_iterations= if you trust it)")
                held = sum(_nbytes(a) for a in args[:num_loop_values])
                if frame[4]:    # the loop keeps every iteration's values, stacked at the end
                    frame[2] += held
                live = frame[0] + held + 2 * frame[2]
                if live > limit:
                    raise _refuse(frame[3], live - frame[0], frame[0], limit)
                _meter.live = live
            return inner(*args)
        wrapped = Plan()
        wrapped.run, wrapped.source, wrapped.graph = run, plan.source, plan.graph
        wrapped.backend, wrapped.num_inputs, wrapped.num_outputs = plan.backend, plan.num_inputs, plan.num_outputs
        return wrapped


    def _count_rows(self, body, carries):
        """Make the plan of scan body `body` count its rows and the values the scan stacks."""
        plan = plan_of(body, self)
        if id(plan) in self._counting:
            return
        limit = self.max_bytes if self.max_bytes is not None else _INF
        max_iterations = self.max_iterations
        inner = plan.run

        def run(*args):
            loops = _meter.loops
            out = inner(*args)
            if loops:
                frame = loops[-1]
                frame[1] += 1
                if max_iterations is not None and frame[1] > max_iterations:
                    raise errors.ResourceExhaustedError(
                        f"scan: more than {max_iterations} rows; the budget is max_iterations="
                        f"{max_iterations} (load the document with a larger max_iterations= if "
                        f"you trust it)")
                frame[2] += sum(_nbytes(v) for v in out[carries:])    # kept, stacked at the end
                live = frame[0] + sum(_nbytes(v) for v in out[:carries]) + 2 * frame[2]
                if live > limit:
                    raise _refuse(frame[3], live - frame[0], frame[0], limit)
                _meter.live = live
            return out
        wrapped = Plan()
        wrapped.run, wrapped.source, wrapped.graph = run, plan.source, plan.graph
        wrapped.backend, wrapped.num_inputs, wrapped.num_outputs = plan.backend, plan.num_inputs, plan.num_outputs
        self._counting.add(id(wrapped))
        body.derived.plans[self.name] = wrapped


class _Prediction:
    """A node's output bytes from its input shapes (its op's inference, remembered per
    shape), or from its input values for the ops of `_VALUE_SIZED`; None if unknown."""

    __slots__ = ("node", "known", "dts", "by_value")

    def __init__(self, node):
        self.node = node
        self.known = {}
        self.dts = [t.dtype for t in node.inputs]
        self.by_value = _VALUE_SIZED.get(node.op.name)

    def __call__(self, args):
        if self.by_value is not None:
            return self.by_value(args, self.node)
        try:     # the shapes of the inputs (a resource handle's shape is the variable's)
            key = args[0].shape if len(args) == 1 else tuple([a.shape for a in args])
        except AttributeError:
            key = tuple([a.shape if isinstance(a, (np.ndarray, np.generic)) else () for a in args])
        need = self.known.get(key, False)
        if need is False:
            if len(self.known) >= _PREDICTIONS_KEPT:
                self.known.clear()
            need = self.known[key] = self._infer(key)
        return need

    def _infer(self, key):
        node = self.node
        shapes = [key] if len(node.inputs) == 1 else list(key)
        shapes = [() if t.dtype is dtypes.resource else s for s, t in zip(shapes, node.inputs)]
        try:
            types = node.op.infer(shapes, self.dts, node.attrs)
        except Exception:   # the kernel will say what is wrong, naming the node
            return None
        total = 0
        for shape, dtype in types:
            if dtype is dtypes.resource:
                continue
            if None in tuple(shape):
                return None
            total += int(np.prod(shape, dtype=np.int64)) * dtype.np.itemsize
        return total


def _check_outputs(node, declared, results):
    """Bytes of a node's results, which must have the types the document declares for it
    (a kernel that disagrees with its op's inference is stopped at the node)."""
    total = 0
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
    return total

