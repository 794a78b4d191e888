"""Helpers the ops' ONNX forms share (the `onnx=` of their registry rows).

A form is `form(e, node, inputs) -> output name(s)`: `e` is the exporter's emitter
(graph/onnx_export.py, `Emitter`: op, const, ints, scalar, cast, reduce, ...), `node` has
`.attrs` and `.inputs` / `.outputs` (each with a static `.shape` and `.dtype`), `inputs` are
the ONNX names of the node's inputs. Nothing here imports onnx or the graph layer.
"""

__all__ = ["chain", "reduced_axes", "reduce_form", "shape_of", "float_math", "iota", "scatter_adjoint", "BIG",
           "with_float64", "newton_float64"]


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
        return e.reduce(onnx_type, ins[0], reduced_axes(node), node.attrs.get("keepdims", False))
    return form


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


def newton_float64(e, x, seed_type, residual):
    """A float64 value from onnxruntime's float32 `seed_type(x)` and two Newton steps on
    `residual(y) -> (r, dr/dy)` (each step doubles the correct digits: 7 -> 14 -> 16)."""
    y = e.cast(e.op(seed_type, e.cast(x, "float32")), "float64")
    for _ in range(2):
        r, dr = residual(y)
        y = e.op("Sub", y, e.op("Div", r, dr))
    return y


def float_math(form):
    """`form` for float inputs; integer inputs go through float64 and back (ONNX's math
    ops take floats only): used where numpy computes in the input's integer dtype."""
    def wrapped(e, node, ins):
        dt = node.outputs[0].dtype
        if dt.is_floating:
            return form(e, node, ins)
        f = [e.cast(x, "float64") for x in ins]
        return e.cast(form(e, node, f), dt)
    return wrapped


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
