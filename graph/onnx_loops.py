"""The ONNX `Loop` of the `while` and `scan` forms, with the values they keep per iteration.

A loop raised for its gradient keeps, per iteration, what its body's backward reads. Where
that is a cond's side output, the branch that did not run gives an empty stand-in (zero
size, control_flow._with_extras), and the kernels stack those rows as zeros of the real
rows' shape (while_op._stack). An ONNX scan output needs one shape in every iteration
(onnxruntime: "Inconsistent shape in loop output"), so such a value is carried instead: its
real rows flattened end to end and the shape of a real row, with a flag per iteration (the
scan output); after the loop the flags pick each iteration's row, a zero row for a
stand-in. `e` is graph/onnx_export.py's Emitter.
"""
import numpy as np

from defun.runtime import dtypes

__all__ = ["loop_keeping"]

_I64 = dtypes.int64


def loop_keeping(e, trips, first, init, types, body, kept_types, loose, name):
    """An ONNX Loop: trip count `trips` (a name, or "" for none), first condition `first`,
    loop variables `init` of `types` [(shape, dtype)]; `body(iteration, variables)` returns
    (again, new variables, kept rows of `kept_types`), `loose[k]` when kept row k may be a
    cond's empty stand-in. Returns (final variables, kept rows stacked on a first axis)."""
    n, carried = len(init), [k for k, lo in enumerate(loose) if lo]
    extra_types = [t for k in carried for t in (((None,), kept_types[k][1]), ((len(kept_types[k][0]),), _I64))]
    scan_types = [((), dtypes.bool) if lo else t for t, lo in zip(kept_types, loose)]
    extra_init = [v for k in carried for v in (e.const(np.zeros((0,), kept_types[k][1].np)),
                                               e.const(np.zeros(len(kept_types[k][0]), np.int64)))]

    def whole(args):
        again, new, rows = body(args[0], list(args[2:2 + n]))
        extra, scans = list(args[2 + n:]), []
        for k, row in enumerate(rows):
            if loose[k]:
                j = 2 * carried.index(k)
                extra[j], extra[j + 1], flag = _step(e, extra[j], extra[j + 1], row)
                scans.append(flag)
            else:
                scans.append(e.op("Identity", row))
        return [again] + list(new) + extra + scans
    graph = e.subgraph([((), _I64), ((), dtypes.bool)] + list(types) + extra_types, whole,
                       [((), dtypes.bool)] + list(types) + extra_types + scan_types, name=name)
    total = n + len(extra_init) + len(kept_types)
    outs = e.op("Loop", trips, first, *init, *extra_init, n=total, body=graph)
    outs = [outs] if total == 1 else list(outs)
    extra, scanned = outs[n:n + len(extra_init)], outs[n + len(extra_init):]
    kept = [_stacked(e, extra[2 * carried.index(k)], extra[2 * carried.index(k) + 1], s, kept_types[k][1])
            if lo else s for k, (s, lo) in enumerate(zip(scanned, loose))]
    return outs[:n], kept


def _step(e, flat, shape, row):
    """One iteration of a loose kept value: (its real rows so far, a real row's shape, whether
    this row is real: not all its sizes 0, which only a stand-in has)."""
    dims = e.op("Shape", row)
    real = e.op("Greater", e.reduce("ReduceSum", dims, None, False), e.scalar(0, _I64))
    return (e.op("Concat", flat, e.op("Reshape", row, e.ints([-1])), axis=0),
            e.op("Where", real, dims, shape), real)


def _stacked(e, flat, shape, flags, dtype):
    """The rows of every iteration: a real one where its flag is set, else zeros of its shape."""
    f = e.cast(flags, _I64)
    count = e.reduce("ReduceSum", f, None, True)
    rows = e.op("Reshape", flat, e.op("Concat", count, shape, axis=0), allowzero=1)
    zero = e.op("Expand", e.scalar(0, dtype), e.op("Concat", e.ints([1]), shape, axis=0))
    pick = e.op("Mul", f, e.op("CumSum", f, e.scalar(0, _I64)))     # 0: the zero row
    return e.op("Gather", e.op("Concat", zero, rows, axis=0), pick, axis=0)
