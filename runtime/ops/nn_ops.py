"""Neural-network ops: softmax, log_softmax and the two softmax cross-entropies.

Each is one dedicated op with a numerically stable kernel (the max is subtracted before
`exp`) and a gradient built from public ops, so it also has a second derivative. The
cross-entropies return extra outputs that their gradient needs (the gradient w.r.t. the
logits, as TensorFlow's kernels do, and for the dense one -log_softmax, the gradient
w.r.t. the labels): the forward pass already holds them, so the backward pass is a
multiply per input instead of recomputing a softmax (~25% faster per training step than
composing log_softmax, multiply and reduce_sum). Users only see the per-example losses.
"""
import numpy as np

from defun.runtime import errors
from defun.runtime.execute import run_op
from defun.runtime.fused import Kernel
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops.array_ops import _norm_axis, _rank, expand_dims
from defun.runtime.ops.math_ops import add, exp, multiply, negative, reduce_sum, subtract
from defun.runtime.registry import Cost, register
from defun.runtime import batching as bt

__all__ = ["softmax", "log_softmax", "softmax_cross_entropy_with_logits",
           "sparse_softmax_cross_entropy_with_logits"]

_EMPTY = {}


def _softmax_infer(name):
    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(name, dts[0], shape_rules.float_kinds)
        _norm_axis(name, attrs["axis"], len(shapes[0]))
        return [(tuple(shapes[0]), dts[0])]
    return infer


# ufunc.reduce rather than np.sum/np.max: a few us less per call on small arrays.
_add_reduce, _max_reduce = np.add.reduce, np.maximum.reduce


def _shifted(x, axis):
    """x - max(x) along `axis`: every exp below is at most 1."""
    return x - _max_reduce(x, axis=axis, keepdims=True)


def _axis_attr(op_name, x, axis):
    rank = _rank(x)
    if rank == 0:
        raise _args.error(f"{op_name}: logits must have rank >= 1, got a scalar")
    return {"axis": _args.axis_arg(op_name, axis, rank)}


# ------------------------------------------------------------------ softmax, log_softmax
def _softmax_kernel(x, axis):
    e = np.exp(_shifted(x, axis))
    e /= _add_reduce(e, axis=axis, keepdims=True)
    return e


def _softmax_grad(op, g):
    # dx = y * (g - sum(g * y))
    y, axis = op.outputs[0], op.attrs["axis"]
    gy = multiply(g, y)
    return [subtract(gy, multiply(y, reduce_sum(gy, axis, keepdims=True)))]


def _log_softmax_kernel(x, axis):
    s = _shifted(x, axis)
    return s - np.log(_add_reduce(np.exp(s), axis=axis, keepdims=True))


def _log_softmax_grad(op, g):
    # dx = g - softmax(x) * sum(g), and softmax(x) = exp(log_softmax(x))
    y, axis = op.outputs[0], op.attrs["axis"]
    return [subtract(g, multiply(exp(y), reduce_sum(g, axis, keepdims=True)))]


_SOFTMAX = register(
    name="softmax",
    kernel=_softmax_kernel,
    infer=_softmax_infer("softmax"),
    grad=_softmax_grad,
    num_inputs=1,
    attrs={"axis": "int"},
    defaults={},
    kinds=shape_rules.float_kinds,
    onnx="Softmax",
    batch=bt.axes("axis"),
    cost=Cost(scratch=1.25),
)
_LOG_SOFTMAX = register(
    name="log_softmax",
    kernel=_log_softmax_kernel,
    infer=_softmax_infer("log_softmax"),
    grad=_log_softmax_grad,
    num_inputs=1,
    attrs={"axis": "int"},
    defaults={},
    kinds=shape_rules.float_kinds,
    onnx="LogSoftmax",
    batch=bt.axes("axis"),
    cost=Cost(scratch=1.25),
)


def softmax(logits, axis=-1, name=None):
    """exp(x) / sum(exp(x)) along `axis`: `df.softmax([0., 0.]) -> [0.5, 0.5]`."""
    return run_op(_SOFTMAX, (logits,), _axis_attr("softmax", logits, axis), name)


def log_softmax(logits, axis=-1, name=None):
    """x - log(sum(exp(x))) along `axis`, computed without overflow."""
    return run_op(_LOG_SOFTMAX, (logits,), _axis_attr("log_softmax", logits, axis), name)


def _softmax_vjp(g, logits, axis):
    """g pulled back through softmax(logits) (used for second-order gradients)."""
    sm = softmax(logits, axis)
    gy = multiply(g, sm)
    return sm, subtract(gy, multiply(sm, reduce_sum(gy, axis, keepdims=True)))


# ------------------------------------------------------------------ softmax cross-entropy
def _xent_infer(shapes, dts, attrs):
    shape_rules.check_same("softmax_cross_entropy_with_logits", dts)
    shape_rules.check_kinds("softmax_cross_entropy_with_logits", dts[0], shape_rules.float_kinds)
    a, b = shapes
    if len(a) != len(b) or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        raise errors.InvalidArgumentError(
            f"softmax_cross_entropy_with_logits: labels and logits must have the same shape, got "
            f"{shape_rules.shape_str(a)} and {shape_rules.shape_str(b)}")
    shape = tuple(y if x is None else x for x, y in zip(a, b))
    axis = _norm_axis("softmax_cross_entropy_with_logits", attrs["axis"], len(shape))
    return [(shape[:axis] + shape[axis + 1:], dts[0]), (shape, dts[0]), (shape, dts[0])]


def _xent_kernel(labels, logits, axis):
    """(loss, d loss / d logits, -log_softmax(logits)): the last two serve the gradient."""
    if labels.shape != logits.shape:
        raise errors.InvalidArgumentError(
            f"softmax_cross_entropy_with_logits: labels and logits must have the same shape, got "
            f"{labels.shape} and {logits.shape}")
    s = _shifted(logits, axis)
    e = np.exp(s)
    se = _add_reduce(e, axis=axis, keepdims=True)
    neg_log_probs = np.log(se) - s
    loss = _add_reduce(labels * neg_log_probs, axis=axis)
    mass = _add_reduce(labels, axis=axis, keepdims=True)  # 1 for distributions; kept general
    backprop = e * (mass / se) - labels
    return loss, backprop, neg_log_probs


def _xent_grad(op, g_loss, g_backprop, g_neg_log_probs):
    labels, logits = op.inputs
    axis = op.attrs["axis"]
    d_labels = d_logits = None
    if g_loss is not None:
        ge = expand_dims(g_loss, axis)
        d_logits = multiply(ge, op.outputs[1])
        d_labels = multiply(ge, op.outputs[2])
    # The other outputs only receive gradients in second-order differentiation.
    if g_backprop is not None:
        # backprop = softmax(logits) * sum(labels) - labels
        sm, pulled = _softmax_vjp(g_backprop, logits, axis)
        t = reduce_sum(multiply(g_backprop, sm), axis, keepdims=True)
        d_logits = _add(d_logits, multiply(pulled, reduce_sum(labels, axis, keepdims=True)))
        d_labels = _add(d_labels, subtract(t, g_backprop))
    if g_neg_log_probs is not None:
        # neg_log_probs = logsumexp(logits) - logits
        sm = exp(negative(op.outputs[2]))
        d_logits = _add(d_logits, subtract(multiply(sm, reduce_sum(g_neg_log_probs, axis, keepdims=True)),
                                           g_neg_log_probs))
    return [d_labels, d_logits]


def _add(a, b):
    return b if a is None else add(a, b)


def _xent_onnx(e, node, ins):
    labels, logits = ins
    axis = node.attrs["axis"] % len(node.inputs[1].shape)
    neg_log_probs = e.op("Neg", e.op("LogSoftmax", logits, axis=axis))
    loss = e.reduce("ReduceSum", e.op("Mul", labels, neg_log_probs), (axis,), False)
    mass = e.reduce("ReduceSum", labels, (axis,), True)
    backprop = e.op("Sub", e.op("Mul", e.op("Softmax", logits, axis=axis), mass), labels)
    return loss, backprop, neg_log_probs


_XENT = register(
    name="softmax_cross_entropy_with_logits",
    kernel=_xent_kernel,
    infer=_xent_infer,
    grad=_xent_grad,
    num_inputs=2,
    attrs={"axis": "int"},
    defaults={},
    num_outputs=3,
    none_grads=True,
    same_dtype=(0, 1),
    kinds=shape_rules.float_kinds,
    onnx=_xent_onnx,
    batch=bt.axes("axis"),
    cost=Cost(scratch=1.25),
)


def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """Per-example -sum(labels * log_softmax(logits)) along `axis`; differentiable in both.

    >>> df.softmax_cross_entropy_with_logits([[0., 1.]], [[0., 0.]])   # [0.6931]
    """
    attrs = _axis_attr("softmax_cross_entropy_with_logits", logits, axis)
    return run_op(_XENT, (labels, logits), attrs, name)[0]


# ------------------------------------------------------------------ sparse softmax cross-entropy
_SPARSE = "sparse_softmax_cross_entropy_with_logits"


def _sparse_infer(shapes, dts, attrs):
    if not dts[0].is_integer:
        raise errors.InvalidArgumentError(f"{_SPARSE}: labels must be int32 or int64, got {dts[0].name}")
    shape_rules.check_kinds(_SPARSE, dts[1], shape_rules.float_kinds)
    a, b = shapes
    if len(b) != len(a) + 1 or any(x is not None and y is not None and x != y for x, y in zip(a, b)):
        raise errors.InvalidArgumentError(
            f"{_SPARSE}: labels must have the shape of logits without the last axis, got labels "
            f"{shape_rules.shape_str(a)} and logits {shape_rules.shape_str(b)}")
    batch = tuple(y if x is None else x for x, y in zip(a, b[:-1]))
    return [(batch, dts[1]), (batch + (b[-1],), dts[1])]


def _sparse_kernel(labels, logits):
    if logits.dtype.kind != "f":
        raise errors.InvalidArgumentError(f"{_SPARSE}: logits must be floating, got {logits.dtype}")
    if logits.shape[:-1] != labels.shape or logits.ndim == 0:
        raise errors.InvalidArgumentError(
            f"{_SPARSE}: labels must have the shape of logits without the last axis, got labels "
            f"{labels.shape} and logits {logits.shape}")
    depth, n = logits.shape[-1], labels.size
    # One reduction checks the range: read as uint64, a negative label exceeds any depth.
    # (labels.min() and labels.max() cost ~3 us of Python wrapping on a batch of 8.)
    if n and _max_reduce(labels, None, np.uint64) >= depth:
        _raise_bad_label(labels, depth)
    s = logits - _max_reduce(logits, -1, None, None, True)  # every exp below is at most 1
    e = np.exp(s)
    se = _add_reduce(e, -1, None, None, True)
    # Flat positions of the labelled entries, r * depth + label: 1-D indexing of flat views
    # is ~2 us cheaper than indexing [rows, labels] twice. (Past the check, depth is 0 only
    # when n is 0.)
    at = _arange(0, n * depth, depth or 1)
    at += labels.reshape(-1)
    loss = np.log(se[..., 0]) - s.reshape(-1)[at].reshape(labels.shape)
    backprop = (e / se).reshape(-1)  # a view when e is C-ordered, else a copy: either is ours
    backprop[at] -= 1
    return loss, backprop.reshape(logits.shape)


def _raise_bad_label(labels, depth):
    bad = labels[(labels < 0) | (labels >= depth)].reshape(-1)[0]
    raise errors.InvalidArgumentError(f"{_SPARSE}: label {bad} is outside the valid range [0, {depth})")


_arange = np.arange


def _sparse_grad(op, g_loss, g_backprop):
    logits = op.inputs[1]
    d_logits = None
    if g_loss is not None:
        d_logits = multiply(expand_dims(g_loss, -1), op.outputs[1])
    if g_backprop is not None:  # second order: backprop = softmax(logits) - one_hot(labels)
        d_logits = _add(d_logits, _softmax_vjp(g_backprop, logits, -1)[1])
    return [None, d_logits]


# a constant message: formatting a string in compiled code costs numba ~1 s of compile
_BAD_LABEL = f"{_SPARSE}: a label is outside the valid range"


def _sparse_loops(labels, logits):
    """The fused form (numba-compilable loops) for 2-D logits: (loss, backprop) in one pass
    per row, the exps kept in `backprop` (a bad label raises; the numpy kernel then says which)."""
    n, depth = logits.shape
    loss = np.empty(n, logits.dtype)
    backprop = np.empty((n, depth), logits.dtype)
    for r in range(n):
        label = labels[r]
        if label < 0 or label >= depth:
            raise errors.InvalidArgumentError(_BAD_LABEL)
        top = logits[r, 0]
        for j in range(1, depth):
            top = np.maximum(top, logits[r, j])
        total = 0.0
        for j in range(depth):
            e = np.exp(logits[r, j] - top)
            backprop[r, j] = e
            total += e
        loss[r] = np.log(total) - (logits[r, label] - top)
        for j in range(depth):
            backprop[r, j] = backprop[r, j] / total
        backprop[r, label] -= 1
    return loss, backprop


def _rank2_logits(node):
    return len(node.inputs[1].shape) == 2


def _sparse_onnx(e, node, ins):
    labels, logits = e.cast(ins[0], "int64"), ins[1]
    at = e.op("Unsqueeze", labels, e.ints([-1]))
    loss = e.op("Neg", e.squeeze(e.op("GatherElements", e.op("LogSoftmax", logits, axis=-1), at, axis=-1), [-1]))
    depth = e.op("Squeeze", e.dim(logits, -1, node.inputs[1].shape), e.ints([0]))
    hot = e.op("Equal", at, e.op("Range", e.scalar(0, "int64"), depth, e.scalar(1, "int64")))
    backprop = e.op("Sub", e.op("Softmax", logits, axis=-1), e.cast(hot, node.inputs[1].dtype))
    return loss, backprop


_SPARSE_XENT = register(
    name=_SPARSE,
    kernel=_sparse_kernel,
    infer=_sparse_infer,
    grad=_sparse_grad,
    num_inputs=2,
    attrs={},
    defaults={},
    num_outputs=2,
    none_grads=True,
    kinds=shape_rules.int_kinds,
    fused=Kernel(_sparse_loops, (), _rank2_logits),
    onnx=_sparse_onnx,
    batch=bt.leading,
)


def sparse_softmax_cross_entropy_with_logits(labels, logits, name=None):
    """Per-example -log_softmax(logits)[label]; `labels` are class ids (int), not differentiable.

    >>> df.sparse_softmax_cross_entropy_with_logits([1], [[0., 0.]])   # [0.6931]
    """
    if _rank(logits) == 0:
        raise _args.error(f"{_SPARSE}: logits must have rank >= 1, got a scalar")
    return run_op(_SPARSE_XENT, (labels, logits), _EMPTY, name)[0]

