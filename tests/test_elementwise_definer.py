"""Every elementwise op (one output, no attrs, one input or two of one dtype, batched
elementwise) gets the eager fast path, whichever file declares it (runtime/ops/elementwise.py
is the one definer), and the numba backend's fused form where numba has the function."""
import numpy as np
import pytest

import defun as df
from defun.runtime import batching as bt
from defun.runtime import registry
from defun.runtime.fast_dispatch import SPECIALIZED

# The qualifying ops whose public function is the op's own (fast_dispatch.op_function).
FAST = [
    "abs", "acos", "acosh", "add", "angle", "asin", "asinh", "atan", "atan2", "atanh", "bessel_i0e", "bessel_i1e",
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift", "ceil", "cos", "cosh", "digamma", "divide", "elu", "equal", "erf", "erfc", "erfinv", "exp", "expm1", "floor",
    "floordiv", "greater", "greater_equal", "hypot", "igamma", "igammac", "is_finite", "is_nan", "less",
    "less_equal", "lgamma", "log", "log10", "log1p", "log2", "logaddexp", "logical_and", "logical_not",
    "logical_or", "maximum", "minimum", "mod", "multiply", "negative", "not_equal", "polygamma", "pow",
    "reciprocal", "relu", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "softplus", "sqrt", "square",
    "squared_difference", "subtract", "tan", "tanh", "xlog1py", "xlogy",
]
# Qualifying rows whose public functions do more than call the op, so they keep their own:
# a real input returned as it is (conj, real) or zeros for it (imag), the parts' dtype rule
# (complex), TF's `input` and `dtype=` parameters (identity, stop_gradient, zeros_like, ones_like).
OWN_FUNCTION = {"complex", "conj", "imag", "real", "identity", "stop_gradient", "zeros_like", "ones_like"}
# Fused (numba) forms added with the definer: numpy's scalar function of the kernel.
FUSED = ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "cosh", "expm1", "hypot",
         "log10", "log2", "logaddexp", "sinh", "tan"]


def _qualifying():
    return sorted(op.name for op in registry.all_ops()
                  if op.batch is bt.elementwise and op.single and not op.attrs and op.num_inputs in (1, 2)
                  and (op.num_inputs == 1 or op.same_dtype == (0, 1)))


def test_the_lists_are_every_qualifying_op():
    assert sorted(FAST + sorted(OWN_FUNCTION)) == _qualifying()


@pytest.mark.parametrize("name", FAST)
def test_each_qualifying_op_has_the_fast_path(name):
    f = SPECIALIZED.get(name)
    assert f is not None, f"{name} has no eager fast path (declare it with runtime/ops/elementwise.py)"
    public = [getattr(ns, name, None) for ns in (df, df.math, df.nn)]
    assert f in public, f"df's {name} is not the fast-path function"


@pytest.mark.parametrize("name", FUSED)
def test_fused_forms_run_in_numba_as_the_kernel(name):
    pytest.importorskip("numba")
    op = registry.get(name)
    assert op.fused is not None
    rng = np.random.default_rng(0)
    lo, hi = {"acosh": (1.5, 3.0), "acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "atanh": (-0.9, 0.9),
              "log2": (0.1, 3.0), "log10": (0.1, 3.0)}.get(name, (-2.0, 2.0))
    args = [rng.uniform(lo, hi, (3, 4)) for _ in range(op.num_inputs)]
    f = SPECIALIZED[name]
    eager = f(*[df.constant(a) for a in args]).numpy()
    fused = df.defun(lambda *t: f(*t) * 2.0 + 1.0, backend="numba")
    np.testing.assert_allclose(fused(*[df.constant(a) for a in args]).numpy(), eager * 2.0 + 1.0, rtol=1e-12)
