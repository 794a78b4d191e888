"""Op rows: the ops whose shape is an input tensor (reshape, broadcast_to, tile, fill, range
with a shape known only when the graph runs; runtime/ops/dynamic_shape_ops.py, shape_ops.py, base_ops.py).

Each node carries the static sizes known while tracing (`shape`, None where unknown): the
rows give both fully known and partly unknown ones, so inference must admit the kernel's
sizes (DATA_DEPENDENT_SIZES) rather than equal them.
"""
import numpy as np

import defun as df
from opcheck import DATA_DEPENDENT_SIZES, NUMERIC, A, Row, V, adjoint_of, internal_op, idx

i64 = df.int64
DATA_DEPENDENT_SIZES.update({"dynamic_reshape", "dynamic_broadcast_to", "dynamic_tile", "dynamic_fill",
                             "dynamic_range"})


def _op(name):
    call = internal_op(name)
    return lambda *xs, shape: call(*xs, shape=tuple(shape))


def _tile_reduce_ref(g, m, like, shape):
    return adjoint_of(lambda x: np.tile(x, m), like.shape, g)


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
]
