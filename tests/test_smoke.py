import numpy as np

import defun as df


def test_add_and_gradient():
    x = df.constant([1.0, 2.0])
    with df.GradientTape() as tape:
        tape.watch(x)
        y = df.reduce_sum(x * x + 1.0)
    np.testing.assert_allclose(np.asarray(y), 7.0)
    np.testing.assert_allclose(np.asarray(tape.gradient(y, x)), [2.0, 4.0])
