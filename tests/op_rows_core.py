"""The core op table: the rows of the elementwise math, reductions, shape and index ops
(the other families are the other tests/op_rows_*.py; tests/op_table.py gathers them all).
"""
import numpy as np

import defun as df
from defun.runtime.ops import array_ops, index_ops
from opcheck import A, FLOATS, NUMERIC, Row, V, adjoint_of, bin_, idx, internal_op, red, un, via_float64


f16, f32, f64, i32, i64, b = df.float16, df.float32, df.float64, df.int32, df.int64, df.bool


# ---------------------------------------------------------------------------------------
# numpy references that are not one numpy call

def _np_log_softmax(x, axis=-1):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def _xent_ref(labels, logits, axis=-1):
    l64 = logits.astype(np.float64)
    return (-(labels * _np_log_softmax(l64, axis)).sum(axis=axis)).astype(logits.dtype)


def _sparse_ref(labels, logits):
    lp = _np_log_softmax(logits.astype(np.float64), -1)
    out = np.empty(labels.shape)
    for idx in np.ndindex(labels.shape):
        out[idx] = -lp[idx + (labels[idx],)]
    return out.astype(logits.dtype)


def _mean_ref(x, axis=None, keepdims=False):
    if x.dtype.kind == "f":
        return np.asarray(np.mean(x, axis=axis, keepdims=keepdims, dtype=np.float64)).astype(x.dtype)
    s = np.sum(x, axis=axis, keepdims=keepdims, dtype=np.int64)
    n = x.size // max(np.size(s), 1)
    return np.asarray(np.trunc(s / n)).astype(x.dtype)  # truncation toward zero, as TensorFlow


def _matmul_ref(a, b, transpose_a=False, transpose_b=False):
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    b = np.swapaxes(b, -1, -2) if transpose_b else b
    return np.matmul(a, b)


def _pad_ref(x, c, paddings, mode="CONSTANT"):
    if x.ndim == 0:
        return x.copy()
    if mode == "CONSTANT":
        return np.pad(x, paddings, constant_values=c)
    return np.pad(x, paddings, mode.lower())


def _one_hot_ref(ind, depth, on_value=1.0, off_value=0.0, axis=-1, dtype=f32):
    out = np.full(ind.shape + (depth,), off_value)
    for idx in np.ndindex(ind.shape):
        if 0 <= ind[idx] < depth:
            out[idx + (ind[idx],)] = on_value
    out = out.astype(dtype.np)
    return out if axis == -1 else np.moveaxis(out, -1, axis)


def _split_ref(x, num_or_size_splits, axis=0):
    if isinstance(num_or_size_splits, int):
        return np.split(x, num_or_size_splits, axis)
    sizes = list(num_or_size_splits)
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return np.split(x, np.cumsum(sizes)[:-1], axis)


def _range_ref(start, limit=None, delta=1, dtype=None):
    if limit is None:
        start, limit = 0, start
    is_float = any(isinstance(v, float) for v in (start, limit, delta))
    want = dtype.np if dtype is not None else (np.float32 if is_float else np.int32)
    return np.arange(start, limit, delta, dtype=np.float64).astype(want)


def _prod_others_ref(x, axis=None):
    axes = tuple(range(x.ndim)) if axis is None else tuple(a % x.ndim for a in axis)
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape):
        y = x.astype(np.float64).copy()
        y[idx] = 1
        group = tuple(0 if d in axes else i for d, i in enumerate(idx))
        out[idx] = np.prod(y, axis=axes, keepdims=True)[group]
    return out


def _prod_others_grad_ref(gg, x, axis=None):
    axes = tuple(range(x.ndim)) if axis is None else tuple(a % x.ndim for a in axis)
    out = np.zeros(x.shape)
    idxs = list(np.ndindex(x.shape))
    for j in idxs:
        for i in idxs:
            same_group = all(i[d] == j[d] for d in range(x.ndim) if d not in axes)
            if i == j or not same_group:
                continue
            p = 1.0
            for k in idxs:
                if k not in (i, j) and all(k[d] == j[d] for d in range(x.ndim) if d not in axes):
                    p *= x[k]
            out[j] += gg[i] * p
    return out.astype(x.dtype)


def _sum_to_ref(g, like):
    return adjoint_of(lambda x: np.broadcast_to(x, g.shape), like.shape, g)


def _custom_exp(x):
    @df.custom_gradient
    def f(t):
        y = df.exp(t)
        return y, lambda dy: dy * y
    return f(x)


# ---------------------------------------------------------------------------------------
# Variant builders

NUM = NUMERIC
E = np.newaxis  # for slicing keys: None
S = slice

ROWS = [
    # ------------------------------------------------------------- binary arithmetic
    Row("add", df.add, np.add, bin_(), NUM + (f16,)),
    Row("subtract", df.subtract, np.subtract, bin_(), NUM),
    Row("multiply", df.multiply, np.multiply, bin_(), NUM + (f16,), second=True),
    Row("divide", df.divide, np.true_divide, bin_(ky="nonzero"), NUM, second=True),
    Row("floordiv", df.floordiv, np.floor_divide, bin_(ky="nonzero"), NUM, grad=False),
    Row("mod", df.mod, np.mod, bin_(ky="nonzero"), NUM, second=True),
    Row("pow", df.pow, np.power, bin_(kx="positive") + [
        V([A((2, 3), "positive"), A((3,), "positive")], dtypes=(i32, i64), grad=False)], second=True),
    Row("maximum", df.maximum, np.maximum, bin_("distinct", "distinct"), NUM, second=True),
    Row("minimum", df.minimum, np.minimum, bin_("distinct", "distinct"), NUM),
    # ------------------------------------------------------------- unary
    Row("negative", df.negative, np.negative, un(), NUM),
    Row("square", df.square, np.square, un(), NUM, second=True),
    Row("sqrt", df.sqrt, np.sqrt, un("positive"), second=True),
    Row("rsqrt", df.rsqrt, via_float64(lambda x: 1 / np.sqrt(x)), un("positive"), second=True),
    Row("exp", df.exp, np.exp, un(), FLOATS + (f16,), second=True),
    Row("log", df.log, np.log, un("positive"), second=True),
    Row("log1p", df.log1p, np.log1p, un("unit"), second=True),
    Row("tanh", df.tanh, np.tanh, un(), FLOATS + (f16,), second=True),
    Row("sigmoid", df.sigmoid, via_float64(lambda x: 1 / (1 + np.exp(-x))), un(), FLOATS + (f16,), second=True),
    Row("relu", df.relu, lambda x: np.maximum(x, x.dtype.type(0)), un("nonzero"), NUM),
    Row("abs", df.abs, np.abs, un("nonzero"), NUM),
    Row("sign", df.sign, np.sign, un(), NUM, grad=False),
    Row("sin", df.sin, np.sin, un(), second=True),
    Row("cos", df.cos, np.cos, un()),
    Row("floor", df.floor, np.floor, un(), grad=False),
    Row("round", df.round, np.round, un() + [V([A(value=[0.5, 1.5, 2.5, -0.5, -1.7])])], grad=False),
    # ------------------------------------------------------------- comparison and logic
    *[Row(name, getattr(df, name), getattr(np, name),
          bin_() + [V([A(value=[1., 2., 3.]), A(value=[1., 0., 3.])]),
                    V([A((2, 3), "index", high=3, dtype=i32), A((3,), "index", high=3, dtype=i32)])],
          NUM, grad=False)
      for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")],
    Row("logical_and", df.logical_and, np.logical_and, bin_("bool", "bool"), (b,), grad=False),
    Row("logical_or", df.logical_or, np.logical_or, bin_("bool", "bool"), (b,), grad=False),
    Row("logical_not", df.logical_not, np.logical_not, un("bool"), (b,), grad=False),
    # ------------------------------------------------------------- cast, add_n, matmul
    Row("cast", lambda x, dtype: df.cast(x, dtype), lambda x, dtype: x.astype(dtype.np),
        [V([A((2, 3))], dict(dtype=f64)), V([A((3,))], dict(dtype=i32)),
         V([A(value=[-1.7, 2.5, 0.2])], dict(dtype=i64)),
         V([A((2,), "bool")], dict(dtype=f32)), V([A((2, 2))], dict(dtype=f32), grad=False),
         V([A((), dtype=i64)], dict(dtype=f16))], NUM),
    Row("add_n", lambda *xs: df.add_n(list(xs)), lambda *xs: sum(xs[1:], xs[0]),
        [V([A((2, 3))] * 3), V([A(())] * 2)], NUM),      # one shape: add_n does not broadcast (TF)
    Row("matmul", df.matmul, _matmul_ref,
        [V([A((2, 3)), A((3, 4))]), V([A((2, 2, 3)), A((2, 3, 4))]), V([A((2, 2, 3)), A((3, 4))]),
         V([A((1, 2, 3)), A((4, 3, 2))]), V([A((3, 2)), A((3, 4))], dict(transpose_a=True)),
         V([A((2, 3)), A((4, 3))], dict(transpose_b=True)),
         V([A((2, 3, 2)), A((2, 4, 3))], dict(transpose_a=True, transpose_b=True))],
        NUM, second=True),
    # ------------------------------------------------------------- reductions
    Row("reduce_sum", df.reduce_sum, lambda x, axis=None, keepdims=False:
        np.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype), red(), NUM + (f16,),
        also=("broadcast_to", "reshape")),
    Row("reduce_mean", df.reduce_mean, _mean_ref, red(), NUM, second=True),
    Row("reduce_max", df.reduce_max, lambda x, axis=None, keepdims=False:
        np.max(x, axis=axis, keepdims=keepdims), red("distinct"), NUM, second=True),
    Row("reduce_min", df.reduce_min, lambda x, axis=None, keepdims=False:
        np.min(x, axis=axis, keepdims=keepdims), red("distinct"), NUM),
    Row("reduce_prod", df.reduce_prod, lambda x, axis=None, keepdims=False:
        np.prod(x, axis=axis, keepdims=keepdims, dtype=x.dtype),
        red("nonzero") + [V([A(value=[[0., 2., 3.], [1., 0., 0.]])], dict(axis=1))], NUM,
        also=("reduce_prod_others",), second=True),
    Row("argmax", df.argmax, lambda x, axis=0, output_type=i64: np.argmax(x, axis).astype(output_type.np),
        [V([A((5,), "distinct")]), V([A((2, 3), "distinct")], dict(axis=1)),
         V([A((2, 3, 4), "distinct")], dict(axis=-1, output_type=i32))], NUM, grad=False),
    Row("argmin", df.argmin, lambda x, axis=0, output_type=i64: np.argmin(x, axis).astype(output_type.np),
        [V([A((5,), "distinct")]), V([A((2, 3), "distinct")], dict(axis=0)),
         V([A((2, 3, 4), "distinct")], dict(axis=-2, output_type=i32))], NUM, grad=False),
    # ------------------------------------------------------------- identity-like, shape ops
    Row("identity", df.identity, np.copy, un(), NUM),
    Row("stop_gradient", df.stop_gradient, np.copy, un(), NUM, grad=False),
    Row("zeros_like", df.zeros_like, np.zeros_like, un() + [V([A((3,), "bool")])], NUM),
    Row("ones_like", df.ones_like, np.ones_like, un() + [V([A((3,), "bool")])], NUM),
    Row("shape", lambda x, out_type=i32: df.shape(x, out_type),
        lambda x, out_type=i32: np.array(x.shape, out_type.np),
        un() + [V([A((2, 0, 3))], dict(out_type=i64))], NUM, grad=False),
    Row("size", lambda x, out_type=i32: df.size(x, out_type),
        lambda x, out_type=i32: np.array(x.size, out_type.np),
        un() + [V([A((2, 0, 3))], dict(out_type=i64))], NUM, grad=False),
    Row("reshape", df.reshape, lambda x, shape: np.reshape(x, shape),
        [V([A((6,))], dict(shape=(2, 3))), V([A((2, 3))], dict(shape=(-1,))), V([A(())], dict(shape=(1, 1))),
         V([A((2, 3, 4))], dict(shape=[4, -1])), V([A((1, 1))], dict(shape=()))], NUM, second=True),
    Row("expand_dims", df.expand_dims, lambda x, axis: np.expand_dims(x, axis),
        [V([A(())], dict(axis=0)), V([A((3,))], dict(axis=-1)), V([A((2, 3))], dict(axis=1)),
         V([A((2, 3))], dict(axis=-2)), V([A((2, 3))], dict(axis=2)), V([A((2, 3))], dict(axis=-3))], NUM),
    Row("squeeze", df.squeeze, lambda x, axis=None: np.squeeze(x, tuple(axis) if isinstance(axis, list) else axis),
        [V([A((1, 3, 1))]), V([A((1, 3, 1))], dict(axis=[0])), V([A((1,))]), V([A((2, 1))], dict(axis=-1))],
        NUM),
    Row("broadcast_to", df.broadcast_to, lambda x, shape: np.broadcast_to(x, shape),
        [V([A((3,))], dict(shape=(2, 3))), V([A(())], dict(shape=[2, 2])), V([A((2, 1))], dict(shape=(2, 4))),
         V([A((2, 3))], dict(shape=(2, 3))), V([A(())], dict(shape=()))] +
        # past array_ops._BROADCAST_COPY_MAX elements the kernel returns a view, not a copy
        [V([A((3,))], dict(shape=(1400, 3))), V([A((70, 1))], dict(shape=(1, 70, 70)))], NUM, second=True),
    Row("where", df.where, np.where,
        [V([A((3,), "bool"), A((3,)), A((3,))]), V([A((2, 3), "bool"), A((3,)), A(())]),
         V([A((2, 1), "bool"), A((1, 3)), A((2, 3))]), V([A((), "bool"), A((2,)), A((2,))])], NUM),
    Row("transpose", df.transpose, lambda x, perm=None: np.transpose(x, perm),
        [V([A(())]), V([A((3,))]), V([A((2, 3))]), V([A((2, 3, 4))], dict(perm=(1, 0, 2))),
         V([A((2, 3, 4))], dict(perm=[2, 0, 1])), V([A((2, 3, 4))], dict(perm=(-1, 0, 1)))], NUM,
        second=True),
    Row("concat", lambda *xs, axis: df.concat(list(xs), axis), lambda *xs, axis: np.concatenate(xs, axis),
        [V([A((2,)), A((3,))], dict(axis=0)), V([A((2, 3)), A((2, 1)), A((2, 2))], dict(axis=1)),
         V([A((2, 3)), A((1, 3))], dict(axis=-2)), V([A((3,))], dict(axis=0)),
         V([A((0, 2)), A((2, 2))], dict(axis=0))], NUM, also=("split",), second=True),
    Row("stack", lambda *xs, axis=0: df.stack(list(xs), axis), lambda *xs, axis=0: np.stack(xs, axis),
        [V([A(()), A(()), A(())]), V([A((3,)), A((3,))], dict(axis=1)),
         V([A((2, 3)), A((2, 3))], dict(axis=-1)), V([A((2, 3))] * 3, dict(axis=0))], NUM,
        also=("unstack",), second=True),
    Row("unstack", df.unstack, lambda x, axis=0, num=None: [np.take(x, i, axis) for i in range(x.shape[axis])],
        [V([A((3,))]), V([A((2, 3))], dict(axis=1)), V([A((2, 3, 4))], dict(axis=-1)),
         V([A((1, 2))], dict(num=1))], NUM, also=("stack",)),
    Row("split", df.split, _split_ref,
        [V([A((6,))], dict(num_or_size_splits=3)), V([A((2, 6))], dict(num_or_size_splits=[1, -1, 2], axis=1)),
         V([A((4, 3))], dict(num_or_size_splits=[1, 3])), V([A((2, 4))], dict(num_or_size_splits=2, axis=-1)),
         V([A((3,))], dict(num_or_size_splits=1)), V([A((3,))], dict(num_or_size_splits=[0, 3]))], NUM,
        also=("concat",), second=True),
    Row("tile", df.tile, lambda x, multiples: np.tile(x, multiples),
        [V([A((3,))], dict(multiples=[2])), V([A((2, 3))], dict(multiples=(2, 1))), V([A(())], dict(multiples=[])),
         V([A((2, 1, 2))], dict(multiples=[1, 3, 2])), V([A((2,))], dict(multiples=[0]))], NUM,
        also=("tile_reduce",), second=True),
    Row("pad", lambda x, c, paddings, mode="CONSTANT": df.pad(x, paddings, mode, c), _pad_ref,
        [V([A((3,)), A(())], dict(paddings=[[1, 2]])), V([A((2, 3)), A(())], dict(paddings=[[0, 1], [2, 0]])),
         V([A(()), A(())], dict(paddings=[])),
         V([A((3, 4)), A(())], dict(paddings=[[1, 2], [2, 3]], mode="REFLECT")),
         V([A((3, 4)), A(())], dict(paddings=[[3, 0], [1, 4]], mode="SYMMETRIC")),
         V([A((4,)), A(())], dict(paddings=[[3, 3]], mode="reflect")),
         V([A((2, 2)), A(())], dict(paddings=[[2, 2], [0, 1]], mode="SYMMETRIC"))], NUM,
        also=("pad_grad",), second=True),
    # ------------------------------------------------------------- indexing
    Row("gather", df.gather, lambda p, i, axis=0: np.take(p, i, axis),
        [V([A((5, 3)), idx([4, 0, 4])]), V([A((5, 3)), idx([[1, 2], [0, 1]], i64)]),
         V([A((3, 4)), idx([3, 0])], dict(axis=1)), V([A((2, 3, 4)), idx([[0], [2]])], dict(axis=-1)),
         V([A((4,)), idx(2)]), V([A((5, 2)), idx(np.zeros(0, np.int32))])], NUM,
        also=("gather_grad", "indexed_slices_to_dense", "reshape"), second=True),
    Row("one_hot", df.one_hot, _one_hot_ref,
        [V([idx([0, 2, -1, 3, 1])], dict(depth=3)), V([idx([[0, 1], [2, 0]], i64)], dict(depth=3, axis=0)),
         V([idx([1, 3])], dict(depth=4, on_value=5.0, off_value=-1.0, dtype=i32)),
         V([idx(1)], dict(depth=2)), V([idx([[0, 1], [2, 0]])], dict(depth=3, axis=1, dtype=f64)),
         V([idx([0, 1])], dict(depth=2, dtype=b))], (None,), grad=False),
    Row("strided_slice", lambda x, key: x[key], lambda x, key: np.asarray(x[key]),
        [V([A((5,))], dict(key=k)) for k in (1, -1, S(1, None), S(None, None, -1), S(-1, 0, -2), S(3, 1),
                                              S(None, None, 2), E, Ellipsis, S(-100, 100), np.int64(2))] +
        [V([A((3, 4))], dict(key=k)) for k in ((0, 1), (S(None), 0), (Ellipsis, -1), (E, 1, Ellipsis),
                                                (S(None), E, S(None, None, -1)), (S(1, None), S(None, None, -3)),
                                                (-1,))] +
        [V([A((2, 3, 4))], dict(key=k)) for k in ((1, S(None, None, -1), E, S(1, 3)), (Ellipsis, E),
                                                   (0, Ellipsis, 1), (S(None), 1))] +
        [V([A(())], dict(key=k)) for k in (Ellipsis, E, ())], NUM,
        also=("strided_slice_grad",), second=True),
    # ------------------------------------------------------------- creation
    Row("zeros", df.zeros, lambda shape, dtype=f32: np.zeros(shape, df.as_dtype(dtype).np),
        [V([], dict(shape=(2, 3))), V([], dict(shape=[], dtype=i32)), V([], dict(shape=[0, 2], dtype=b)),
         V([], dict(shape=np.array([2]), dtype="float64"))], (None,), grad=False),
    Row("ones", df.ones, lambda shape, dtype=f32: np.ones(shape, dtype.np),
        [V([], dict(shape=(2, 3))), V([], dict(shape=[], dtype=i64)), V([], dict(shape=[3], dtype=b))],
        (None,), grad=False),
    Row("fill", lambda value, dims: df.fill(dims, value), lambda value, dims: np.full(dims, value, value.dtype),
        [V([A(())], dict(dims=[2, 3])), V([A(())], dict(dims=[])), V([A(())], dict(dims=(0, 1)))], NUM),
    Row("range", df.range, _range_ref,
        [V([], dict(start=5)), V([], dict(start=1, limit=7, delta=2)), V([], dict(start=0., limit=1., delta=0.25)),
         V([], dict(start=5, limit=1, delta=-1)), V([], dict(start=1.5)), V([], dict(start=2, limit=2)),
         V([], dict(start=0, limit=5, dtype=i64)), V([], dict(start=0, limit=1, delta=0.1)),
         V([], dict(start=3, dtype=f64)), V([], dict(start=0.5, limit=-1, delta=-0.5))], (None,), grad=False),
    # ------------------------------------------------------------- nn
    Row("softmax", df.softmax, via_float64(lambda x, axis=-1: np.exp(_np_log_softmax(x, axis))),
        [V([A((5,))]), V([A((2, 3))]), V([A((2, 3, 4))], dict(axis=1)), V([A((2, 3))], dict(axis=0)),
         V([A(value=[[1., 2., 1000.]])])], FLOATS + (f16,), second=True),
    Row("log_softmax", df.log_softmax, via_float64(_np_log_softmax),
        [V([A((5,))]), V([A((2, 3))]), V([A((2, 3, 4))], dict(axis=1)), V([A((2, 3))], dict(axis=-2)),
         V([A(value=[[1., 2., 1000.]])])], second=True),
    Row("softmax_cross_entropy_with_logits", df.softmax_cross_entropy_with_logits, _xent_ref,
        [V([A((3,), "positive"), A((3,))]), V([A((2, 4), "positive"), A((2, 4))]),
         V([A((2, 3, 4), "positive"), A((2, 3, 4))], dict(axis=1)),
         V([A(value=[[0., 1., 0.], [.5, .5, 0.]]), A(value=[[1., 2., 3.], [-1000., 0., 1000.]])])],
        second=True, also=("expand_dims",)),
    Row("sparse_softmax_cross_entropy_with_logits", df.sparse_softmax_cross_entropy_with_logits, _sparse_ref,
        [V([idx([2, 0, 1]), A((3, 4))]), V([idx(1, i64), A((3,))]), V([idx([[0, 1, 3], [2, 2, 0]]), A((2, 3, 4))]),
         V([idx([2, 0]), A(value=[[1., 2., 3.], [-1000., 0., 1000.]])])], second=True),
    # ------------------------------------------------------------- internal ops (gradient helpers)
    Row("sum_to_like", internal_op("sum_to_like"), _sum_to_ref,
        [V([A((2, 3)), A((3,))]), V([A((2, 3)), A((2, 1))]), V([A((4, 1, 3)), A((1, 3))]), V([A((2,)), A(())])],
        NUM, also=("broadcast_like",), second=True),
    Row("broadcast_like", internal_op("broadcast_like"), lambda x, like: np.broadcast_to(x, like.shape),
        [V([A((3,)), A((2, 3))]), V([A(()), A((2, 2))]), V([A((2, 1)), A((2, 4))])], NUM, also=("sum_to_like",)),
    Row("reshape_like", internal_op("reshape_like"), lambda x, like: np.reshape(x, like.shape),
        [V([A((6,)), A((2, 3))]), V([A((1,)), A(())])], NUM),
    Row("reduce_prod_others", internal_op("reduce_prod_others"), _prod_others_ref,
        [V([A((2, 3))], dict(axis=(1,))), V([A((2, 3))], dict(axis=None)), V([A((2, 3, 2))], dict(axis=(0, 2))),
         V([A(value=[[0., 2., 3.], [0., 0., 1.]])], dict(axis=(1,))), V([A(())], dict(axis=None))],
        NUM, also=("reduce_prod_others_grad",)),
    Row("reduce_prod_others_grad", internal_op("reduce_prod_others_grad"), _prod_others_grad_ref,
        [V([A((2, 3)), A((2, 3))], dict(axis=(1,))), V([A((2, 2)), A(value=[[0., 2.], [3., 0.]])], dict(axis=None)),
         V([A((2, 3, 2)), A((2, 3, 2))], dict(axis=(0, 2)))], NUM, grad="skip",
        note="third-order reduce_prod gradients raise UnimplementedError (test_ops_special)"),
    Row("split_like", internal_op("split_like"),
        lambda g, *likes, axis: np.split(g, np.cumsum([x.shape[axis] for x in likes])[:-1], axis),
        [V([A((5,)), A((2,)), A((3,))], dict(axis=0)), V([A((2, 5)), A((2, 1)), A((2, 4))], dict(axis=1))],
        NUM, also=("concat",)),
    Row("tile_reduce", internal_op("tile_reduce"),
        lambda g, multiples: adjoint_of(lambda x: np.tile(x, multiples),
                                      tuple(d // k for d, k in zip(g.shape, multiples)), g),
        [V([A((6,))], dict(multiples=(2,))), V([A((4, 6))], dict(multiples=(2, 3))), V([A(())], dict(multiples=()))],
        NUM, also=("tile",), second=True),
    Row("pad_grad", lambda g, paddings, mode: internal_op("pad_grad")(g, paddings=paddings, mode=mode),
        lambda g, paddings, mode: adjoint_of(
            lambda x: _pad_ref(x, 0, array_ops._pairs(paddings), mode),
            tuple(d - p - q for d, (p, q) in zip(g.shape, array_ops._pairs(paddings))), g),
        [V([A((6,))], dict(paddings=(1, 2), mode="CONSTANT")),
         V([A((6, 9))], dict(paddings=(1, 2, 2, 3), mode="REFLECT")),
         V([A((6, 9))], dict(paddings=(3, 0, 1, 4), mode="SYMMETRIC")),
         V([A((10,))], dict(paddings=(3, 3), mode="REFLECT"))], NUM, also=("pad",), second=True),
    Row("gather_grad", lambda g, i, p, axis: internal_op("gather_grad")(g, i, p, axis=axis),
        lambda g, i, p, axis: adjoint_of(lambda x: np.take(x, i, axis), p.shape, g),
        [V([A((3, 3)), idx([4, 0, 4]), A((5, 3))], dict(axis=0)),
         V([A((3, 2)), idx([3, 0]), A((3, 4))], dict(axis=1)),
         V([A((2, 2, 1)), idx([[0], [2]]), A((2, 3))], dict(axis=1))], NUM, also=("gather",), second=True),
    Row("strided_slice_grad",
        lambda g, like, key: internal_op("strided_slice_grad")(g, like, **index_ops._slice_attrs(key, like.ndim)),
        lambda g, like, key: adjoint_of(lambda x: x[key], like.shape, g),
        [V([A((2,)), A((5,))], dict(key=S(3, 0, -2))), V([A((1, 4)), A((3, 4))], dict(key=(E, -1))),
         V([A((3, 1, 2)), A((2, 3, 4))], dict(key=(1, S(None, None, -1), E, S(1, 3)))),
         V([A(()), A((3,))], dict(key=1))], NUM, also=("strided_slice",), second=True),
    Row("indexed_slices_to_dense", lambda v, i, dense_shape: internal_op("indexed_slices_to_dense")(
        v, i, dense_shape=dense_shape),
        lambda v, i, dense_shape: adjoint_of(lambda x: x[i], dense_shape, v),
        [V([A((3, 2)), idx([0, 2, 0])], dict(dense_shape=(4, 2))), V([A((2,)), idx([1, 1])], dict(dense_shape=(3,)))],
        NUM, also=("gather",), second=True),
    Row("custom_gradient", _custom_exp, np.exp, un(), also=("exp",)),
]

# Ops the tables do not run, each with the reason and where it is tested instead.
EXCLUDED = {
    "placeholder": "graph IR node with no eager value (graph layer tests)",
    "const": "graph IR node; eager constants are df.constant (graph layer tests)",
    "call": "calls a graph function; needs the graph layer (defun tests)",
    "cond": "control flow holding graph functions (defun control-flow tests)",
    "while": "control flow holding graph functions (defun control-flow tests)",
    "scan": "control flow holding a graph function (tests/test_scan.py)",
    "read_variable": "stateful variable read; test_ops_special.py::test_variable_ops",
    "assign_variable": "stateful; test_ops_special.py::test_variable_ops",
    "assign_add_variable": "stateful; test_ops_special.py::test_variable_ops",
    "assign_sub_variable": "stateful; test_ops_special.py::test_variable_ops",
}

# Ops API.md marks (nd): their rows must say grad=False and the registry must agree.
API_ND = {"floordiv", "sign", "floor", "round", "argmax", "argmin", "shape", "size", "one_hot",
          "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
          "logical_or", "logical_not"}
