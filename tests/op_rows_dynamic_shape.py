"""Op rows: the ops whose shape is an input tensor (reshape, broadcast_to, tile, fill, range
with a shape known only when the graph runs; runtime/ops/dynamic_shape_ops.py, shape_ops.py,
base_ops.py), and `t[a:b]` whose bounds are run-time scalars (dynamic_strided_slice).

Each node carries the static sizes known while tracing (`shape`, None where unknown): the
rows give both fully known and partly unknown ones, so inference must admit the kernel's
sizes (DATA_DEPENDENT_SIZES) rather than equal them.
"""
import numpy as np

import defun as df
from defun.runtime.ops import index_ops
from opcheck import DATA_DEPENDENT_SIZES, NUMERIC, A, Row, V, adjoint_of, internal_op, idx

i64 = df.int64
DATA_DEPENDENT_SIZES.update({"dynamic_reshape", "dynamic_broadcast_to", "dynamic_tile", "dynamic_fill",
                             "dynamic_range", "dynamic_strided_slice"})
S = slice
E = np.newaxis  # for slicing keys: None


def _op(name):
    call = internal_op(name)
    return lambda *xs, shape: call(*xs, shape=tuple(shape))


def _tile_reduce_ref(g, m, like, shape):
    return adjoint_of(lambda x: np.tile(x, m), like.shape, g)


def _slice_attrs(key, rank):
    """dynamic_strided_slice attrs of `key` whose str entries are run-time bounds: the op's
    inputs after x, in its operand order (begins, then ends, then steps), named a, b, c..."""
    attrs = index_ops._slice_attrs(key, rank, lambda k: k if isinstance(k, str) else int(k))
    operands = []
    for k, what in enumerate(("begin", "end", "strides")):
        values = list(attrs[what])
        for d, v in enumerate(values):
            if isinstance(v, str):
                operands.append((v, 3 * d + k))
                values[d] = 1 if k == 2 else 0
        attrs[what] = tuple(values)
    assert [n for n, _ in operands] == sorted(n for n, _ in operands), key
    return dict(attrs, operands=tuple(c for _, c in operands), shape=())


def _numpy_key(key, bounds):
    named = dict(zip("abcdef", (int(b) for b in bounds)))

    def at(k):
        return named[k] if isinstance(k, str) else k
    key = key if isinstance(key, tuple) else (key,)
    return tuple(S(at(k.start), at(k.stop), at(k.step)) if isinstance(k, S) else at(k) for k in key)


def _dynamic_slice(x, *bounds, key):
    return internal_op("dynamic_strided_slice")(x, *bounds, **_slice_attrs(key, np.ndim(x)))


def _dynamic_slice_grad(g, like, *bounds, key):
    return internal_op("dynamic_strided_slice_grad")(g, like, *bounds, **_slice_attrs(key, np.ndim(like)))


def _slices(shape, key, *bounds, dtype=df.int32):
    return V([A(shape)] + [idx(b, dtype) for b in bounds], dict(key=key))


ROWS = [
    Row("dynamic_reshape", _op("dynamic_reshape"), lambda x, d, shape: np.reshape(x, d),
        [V([A((6,)), idx([2, 3])], dict(shape=(2, 3))), V([A((6,)), idx([2, 3])], dict(shape=(None, 3))),
         V([A((2, 3)), idx([-1])], dict(shape=(None,))), V([A(()), idx(np.zeros(0, np.int32))], dict(shape=())),
         V([A((2, 3, 4)), idx([4, -1], i64)], dict(shape=(4, None)))], NUMERIC,
        also=("reshape_like",), second=True),
    Row("dynamic_broadcast_to", _op("dynamic_broadcast_to"), lambda x, d, shape: np.broadcast_to(x, d),
        [V([A((3,)), idx([2, 3])], dict(shape=(None, 3))), V([A(()), idx([2, 2])], dict(shape=(None, None))),
         V([A((2, 1)), idx([2, 4], i64)], dict(shape=(2, 4))), V([A(()), idx(np.zeros(0, np.int32))], dict(shape=()))],
        NUMERIC, second=True),
    Row("dynamic_tile", _op("dynamic_tile"), lambda x, m, shape: np.tile(x, m),
        [V([A((3,)), idx([2])], dict(shape=(None,))), V([A((2, 3)), idx([2, 1])], dict(shape=(2, None))),
         V([A((2, 1, 2)), idx([1, 3, 2], i64)], dict(shape=(1, 3, 2))), V([A((2,)), idx([0])], dict(shape=(None,))),
         V([A(()), idx(np.zeros(0, np.int32))], dict(shape=()))], NUMERIC,
        also=("dynamic_tile_reduce",), second=True),
    Row("dynamic_tile_reduce", _op("dynamic_tile_reduce"), _tile_reduce_ref,
        [V([A((6,)), idx([2]), A((3,))], dict(shape=(None,))), V([A((4, 6)), idx([2, 3]), A((2, 2))], dict(shape=(2, 3))),
         V([A((0,)), idx([0]), A((2,))], dict(shape=(None,)))], NUMERIC, also=("dynamic_tile",), second=True),
    Row("dynamic_fill", _op("dynamic_fill"), lambda d, v, shape: np.full(d, v, v.dtype),
        [V([idx([2, 3]), A(())], dict(shape=(2, None))), V([idx(np.zeros(0, np.int32)), A(())], dict(shape=())),
         V([idx([0, 1], i64), A(())], dict(shape=(None, 1)))], NUMERIC),
    Row("dynamic_range", lambda s, l, d: internal_op("dynamic_range")(s, l, d),
        lambda s, l, d: np.arange(s, l, d, dtype=np.float64).astype(s.dtype),
        [V([A(value=0.), A(value=1.), A(value=0.25)]), V([A(value=2.), A(value=-1.), A(value=-0.5)]),
         V([idx(0), idx(7), idx(2)]), V([idx(5, i64), idx(1, i64), idx(-1, i64)]), V([idx(3), idx(3), idx(1)])],
        grad=False),
    Row("dynamic_strided_slice", _dynamic_slice, lambda x, *b, key: np.asarray(x[_numpy_key(key, b)]),
        [_slices((5,), S("a", "b"), 1, 4), _slices((5,), S("a", "b"), -2, 100), _slices((5,), S("a", "b"), 3, 1),
         _slices((5,), S("a", None, "b"), -1, -2, dtype=i64), _slices((5,), S(None, "a", "b"), 1, -1),
         _slices((5,), S(None, None, "a"), -3), _slices((5,), "a", -2), _slices((3, 4), ("a", S("b", "c")), 2, -3, 3),
         _slices((3, 4), (S("a", None), E, S(None, None, "b")), -2, -1, dtype=i64),
         _slices((2, 3, 4), (Ellipsis, S(1, "b"), "a"), 0, 3), _slices((0, 2), (S("a", "b"),), 0, 2)], NUMERIC,
        also=("dynamic_strided_slice_grad",), second=True),
    Row("dynamic_strided_slice_grad", _dynamic_slice_grad,
        lambda g, like, *b, key: adjoint_of(lambda x: x[_numpy_key(key, b)], like.shape, g),
        [V([A((2,)), A((5,)), idx(3), idx(0), idx(-2)], dict(key=S("a", "b", "c"))),
         V([A((1, 4)), A((3, 4)), idx(-1, i64)], dict(key=(E, "a"))),
         V([A((3, 1, 2)), A((2, 3, 4)), idx(1), idx(3)], dict(key=("a", S(None, None, -1), E, S(1, "b")))),
         V([A(()), A((3,)), idx(1)], dict(key="a"))], NUMERIC, also=("dynamic_strided_slice",), second=True),
]
