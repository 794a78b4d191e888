"""`df.while_loop` loop variables whose sizes change across iterations get unknown sizes in
the body (issue 28 item 4), so nothing there folds the size they entered with."""
import numpy as np
import pytest

import defun as df


def _grow(x0):
    def body(i, v):
        n = df.shape(v)[0]           # the size of v in this iteration
        return i + 1, df.cast(df.range(n + 1), df.float32) * x0
    return df.while_loop(lambda i, v: i < 3, body, (0, df.zeros([0])))


def test_size_made_unknown_by_the_body_is_not_folded():
    # eager: v = [0], [0, 1], [0, 1, 2]; the bug folded shape(v)[0] to 0 every iteration
    x0 = df.constant(2.0)
    eager = _grow(x0)[1].numpy()
    np.testing.assert_allclose(eager, [0.0, 2.0, 4.0])
    traced = df.defun(lambda x: _grow(x)[1])(x0)
    np.testing.assert_allclose(traced.numpy(), eager)


def test_size_changed_by_the_body_relaxes_to_unknown():
    def concat_loop(x):
        def body(i, v):
            return i + 1, df.concat([v, df.reshape(df.cast(df.shape(v)[0], df.float32) * x, [1])], 0)
        return df.while_loop(lambda i, v: i < 4, body, (0, df.zeros([0])))[1]
    seen = {}

    @df.defun
    def f(x):
        out = concat_loop(x)
        seen["shape"] = tuple(out.shape)
        return out, df.shape(out)[0]
    x = df.constant(3.0)
    v, n = f(x)
    np.testing.assert_allclose(v.numpy(), concat_loop(x).numpy())
    np.testing.assert_allclose(v.numpy(), [0.0, 3.0, 6.0, 9.0])
    assert int(n.numpy()) == 4 and seen["shape"] == (None,)


def test_unchanged_sizes_stay_static():
    seen = {}

    @df.defun
    def f(x):
        _, y = df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2.0), (0, x))
        seen["shape"] = tuple(y.shape)
        return y
    np.testing.assert_allclose(f(df.ones([2, 3])).numpy(), np.full([2, 3], 8.0))
    assert seen["shape"] == (2, 3)


def test_rank_change_is_still_refused():
    @df.defun
    def f(x):
        return df.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, df.expand_dims(v, 0)), (0, x))[1]
    with pytest.raises(df.errors.InvalidArgumentError, match="rank"):
        f(df.ones([2]))
