"""Helpers the ops' ONNX forms share (the `onnx=` of their registry rows).

A form is `form(e, node, inputs) -> output name(s)`: `e` is the exporter's emitter
(graph/onnx_export.py, `Emitter`: op, const, ints, scalar, cast, reduce, ...), `node` has
`.attrs` and `.inputs` / `.outputs` (each with a static `.shape` and `.dtype`), `inputs` are
the ONNX names of the node's inputs. Nothing here imports onnx or the graph layer.
"""

__all__ = ["chain", "reduced_axes", "reduce_form", "shape_of", "iota", "scatter_adjoint", "BIG",
           "with_float64", "running", "diag_part_of", "exact_sum", "before_the_start",
           "wide_int_mean"]


def chain(*onnx_types):
    """The form applying one-input ONNX ops in turn: chain("Sqrt", "Reciprocal") is 1/sqrt(x)."""
    def form(e, node, ins):
        x = ins[0]
        for t in onnx_types:
            x = e.op(t, x)
        return x
    return form


def reduced_axes(node, attr="axis"):
    """The sorted non-negative axes a reduction node reduces (a scalar reduces none)."""
    nd = len(node.inputs[0].shape)
    axis = node.attrs.get(attr)
    if axis is None or not nd:
        return tuple(range(nd))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(sorted({a % nd for a in axes}))


def reduce_form(onnx_type):
    """The form of a df reduction (attrs axis, keepdims) by the ONNX reduction `onnx_type`."""
    def form(e, node, ins):
        axes, keep, x = reduced_axes(node), node.attrs.get("keepdims", False), node.inputs[0]
        if onnx_type == "ReduceSum":
            return exact_sum(e, ins[0], axes, keep, x.dtype, len(x.shape))
        return e.reduce(onnx_type, ins[0], axes, keep)
    return form


def exact_sum(e, x, axes, keepdims, dtype, rank):
    """ReduceSum of `x` (of `dtype`, `rank` axes) over the sorted `axes`. onnxruntime sums
    int64 in double (2**60 + 1 + 3 gives 2**60), so an int64 sum is a running sum (CumSum
    is exact) along each axis after a leading zero (for empty axes), keeping its last."""
    if dtype.name != "int64":
        return e.reduce("ReduceSum", x, axes, keepdims)
    for a in axes:
        x = e.op("Pad", x, e.ints([int(k == a) for k in range(2 * rank)]), e.scalar(0, dtype))
        x = e.op("CumSum", x, e.scalar(a, dtype))
        x = e.op("Slice", x, e.ints([-1]), e.ints([BIG]), e.ints([a]))
    return x if keepdims else e.squeeze(x, axes)


def wide_int_mean(e, v, n, total, int64):
    """The int64 mean of `v` truncated toward zero, `n` terms, `total(t)` the exact sum:
    sum(trunc(v / n)) + floor(R / n), R the remainders' sum (|R| < n**2), moved toward zero
    when negative and inexact (no sum can overflow)."""
    rem = total(e.op("Mod", v, n, fmod=1))
    r_rem = e.op("Mod", rem, n, fmod=1)       # the remainder of rem / n, of rem's sign
    zero = e.scalar(0, int64)
    floor = e.op("Sub", e.op("Add", total(e.op("Div", v, n)), e.op("Div", rem, n)),
                 e.cast(e.op("Less", r_rem, zero), int64))
    inexact = e.op("Not", e.op("Equal", r_rem, zero))
    return e.op("Add", floor, e.cast(e.op("And", inexact, e.op("Less", floor, zero)), int64))


def shape_of(e, name, t):
    """The shape of tensor `t` (named `name`) as int64: a constant when static."""
    return e.shape(name, t.shape)


def with_float64(onnx_type, float64_form):
    """The form `onnx_type(x)`, or `float64_form(e, x)` for float64 `x`: onnxruntime has no
    double kernel for some ONNX math ops, so those are written with ones it has."""
    def form(e, node, ins):
        if node.inputs[0].dtype.name == "float64":
            return float64_form(e, ins[0])
        return e.op(onnx_type, *ins)
    return form


BIG = 2 ** 63 - 1     # a Slice bound past either end of any axis


def iota(e, shape):
    """int64 0, 1, 2, ... shaped by the int64 vector `shape`: each element's flat position."""
    n = e.reduce("ReduceProd", shape, None, False)
    flat = e.op("Range", e.scalar(0, "int64"), n, e.scalar(1, "int64"))
    return e.op("Reshape", flat, shape)


def scatter_adjoint(e, g, shape, dtype, positions):
    """The adjoint of an op that only moves elements (slicing, gathering, padding, tiling)
    of an input of shape `shape` (an int64 vector): `positions(idx)` applies the op to `idx`,
    the flat positions of the input's elements, so each output element names the input
    element it came from; the gradient `g` is added into zeros of `shape` there (repeats
    add up)."""
    where = positions(iota(e, shape))
    flat_where = e.op("Unsqueeze", e.op("Reshape", where, e.ints([-1])), e.ints([1]))
    size = e.reduce("ReduceProd", shape, None, True)
    zeros = e.op("Expand", e.scalar(0, dtype), size)
    out = e.op("ScatterND", zeros, flat_where, e.op("Reshape", g, e.ints([-1])), reduction="add")
    return e.op("Reshape", out, shape)


def running(e, xs, axis, rank, dtype, init, step, exclusive=False, reverse=False):
    """A running accumulation along `axis` of the inputs `xs` (names, one shape of `rank`,
    the result's): s_i = step(s_(i-1), x_i...) from s = `init` (a scalar), in an ONNX Loop
    over the axis whose scan outputs are s_i (s_(i-1) when `exclusive`); from the end when
    `reverse`. An empty axis gives xs[0] itself (a Loop of no iterations loses the shape)."""
    perm = [axis] + [d for d in range(rank) if d != axis]
    n = e.op("Squeeze", e.op("Shape", xs[0], start=axis, end=axis + 1), e.ints([0]))

    def scan(_):
        front = [e.op("Transpose", x, perm=perm) if axis else x for x in xs]
        if reverse:
            front = [e.op("Slice", x, e.ints([-1]), e.ints([-BIG]), e.ints([0]), e.ints([-1])) for x in front]
        s0 = e.op("Expand", e.scalar(init, dtype), e.op("Shape", front[0], start=1))

        def body(args):
            i, _, s = args
            new = step(s, *[e.op("Gather", x, i, axis=0) for x in front])
            return [e.op("Identity", e.scalar(True, "bool")), new, e.op("Identity", s if exclusive else new)]
        rest = (None,) * (rank - 1)
        types = [((), "int64"), ((), "bool"), (rest, dtype)]
        _, out = e.op("Loop", n, e.scalar(True, "bool"), s0, n=2,
                      body=e.subgraph(types, body, types[1:] + [(rest, dtype)], name="running"))
        if reverse:
            out = e.op("Slice", out, e.ints([-1]), e.ints([-BIG]), e.ints([0]), e.ints([-1]))
        return [e.op("Transpose", out, perm=[perm.index(d) for d in range(rank)]) if axis else out]
    types = [((None,) * rank, dtype)]
    return e.op("If", e.op("Equal", n, e.scalar(0, "int64")),
                then_branch=e.subgraph([], lambda _: [xs[0]], types, name="empty"),
                else_branch=e.subgraph([], scan, types, name="scan"))


def diag_part_of(e, x, shape):
    """GatherND of the (i, i) pairs, i < min(M, N), with the leading axes as batch axes."""
    r = len(shape)
    k = e.op("Min", e.dim(x, r - 2, shape), e.dim(x, r - 1, shape))
    i = e.op("Range", e.scalar(0, "int64"), e.op("Squeeze", k, e.ints([0])), e.scalar(1, "int64"))
    pairs = e.op("Concat", e.op("Unsqueeze", i, e.ints([1])), e.op("Unsqueeze", i, e.ints([1])), axis=1)
    if r > 2:
        batch = e.op("Shape", x, start=0, end=r - 2)
        pairs = e.op("Expand", pairs, e.op("Concat", batch, k, e.ints([2]), axis=0))
    return e.op("GatherND", x, pairs, batch_dims=r - 2)


def before_the_start(e, x, d, shape, start, step, end):
    """The end bound (int64 [1]) of axis `d` of `x` (static `shape`) for ONNX's Slice, which
    clamps a negative-step start before the first element (start < -size) to the first
    element where Python's slice is empty: there the end becomes 0, so the Slice is empty too.
    `start`, `end`: int64 [1] names; `step`: an int or an int64 [1] name."""
    size = e.dim(x, d, shape)
    before = e.op("Less", e.op("Add", start, size), e.ints([0]))
    if isinstance(step, str):
        before = e.op("And", before, e.op("Less", step, e.ints([0])))
    return e.op("Where", before, e.ints([0]), end)
