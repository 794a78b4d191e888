"""Shared utilities of the op tests: input specs, numpy comparison, inference checks,
finite differences in float64, and a minimal symbolic builder for unknown sizes.

The op tables live in test_ops*.py; everything here is table-agnostic.
"""
import contextlib
import warnings

import numpy as np
import pytest

import defun as df
from defun.runtime import dtypes, errors, registry
from defun.runtime.context import state
from defun.runtime.execute import run_op
from defun.runtime.indexed_slices import IndexedSlices
from defun.runtime.ops import shape_rules
from defun.runtime.convert import convert_operands
from defun.runtime.tensor import Tensor, to_array

FLOATS = (df.float32, df.float64)
NUMERIC = (df.float32, df.float64, df.int32, df.int64)


# ---------------------------------------------------------------------------------------
# Inputs

class A:
    """One input of a table row: a shape and how to draw its values.

    kind: normal | positive (0.5..2) | nonzero (|x| in 0.5..2) | unit (-0.9..0.9) |
          distinct (a permutation: no ties) | index (ints in [0, high)) | bool.
    `dtype` pins the input's dtype (indices, bools); otherwise the row's dtype applies.
    `value` gives fixed contents instead of random ones.
    """

    __slots__ = ("shape", "kind", "dtype", "high", "value")

    def __init__(self, shape=(), kind="normal", dtype=None, high=None, value=None):
        self.shape = tuple(shape)
        self.kind = kind
        self.dtype = dtype
        self.high = high
        self.value = value

    @property
    def is_float_input(self):
        """Follows the row's dtype (so gradients are checked w.r.t. it)."""
        return self.dtype is None and self.kind not in ("index", "bool")

    def __repr__(self):
        return f"A({self.shape}, {self.kind})"


def make_array(spec, dtype, rng):
    """A numpy array for `spec` with the row's `dtype` (a df DType) unless the spec pins one."""
    if spec.value is not None:
        arr = np.asarray(spec.value)
        want = spec.dtype or (dtype if arr.dtype.kind == "f" else None)
        return arr.astype(want.np) if want is not None else arr
    dt = spec.dtype or dtype
    shape, kind = spec.shape, spec.kind
    if kind == "bool" or dt is df.bool:
        return rng.random(shape) < 0.5
    if kind == "index":
        return rng.integers(0, spec.high, size=shape).astype((dt or df.int32).np)
    if dt.is_integer:
        lo, hi = {"positive": (1, 4), "nonzero": (1, 6), "distinct": (0, 0)}.get(kind, (-5, 6))
        if kind == "distinct":
            vals = rng.permutation(int(np.prod(shape)) or 1)[:int(np.prod(shape))] - 3
            return vals.reshape(shape).astype(dt.np)
        vals = rng.integers(lo, hi, size=shape)
        if kind == "nonzero":
            vals = vals * rng.choice([-1, 1], size=shape)
        return np.asarray(vals).astype(dt.np)
    if kind == "positive":
        vals = rng.uniform(0.5, 2.0, size=shape)
    elif kind == "nonzero":
        vals = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1, 1], size=shape)
    elif kind == "unit":
        vals = rng.uniform(-0.9, 0.9, size=shape)
    elif kind == "distinct":
        n = int(np.prod(shape))
        vals = (rng.permutation(n) - n / 2) * 0.37 + rng.uniform(-0.05, 0.05, size=n)
        vals = vals.reshape(shape)
    else:
        vals = rng.normal(size=shape)
    return np.asarray(vals).astype(dt.np)


def make_inputs(specs, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [make_array(s, dtype, rng) for s in specs]


# ---------------------------------------------------------------------------------------
# Comparison

_TOL = {np.dtype(np.float16): (2e-3, 2e-3), np.dtype(np.float32): (2e-5, 2e-6),
        np.dtype(np.float64): (1e-10, 1e-12)}


def as_numpy(x):
    """numpy value of a tensor, IndexedSlices (densified) or array; tuples map elementwise."""
    if isinstance(x, (tuple, list)):
        return [as_numpy(v) for v in x]
    if isinstance(x, IndexedSlices):
        return np.asarray(x)
    if isinstance(x, Tensor):
        return x.numpy()
    return np.asarray(x)


def assert_same(actual, expected, what="", tol=None):
    """`actual` (tensor/array) equals numpy `expected`: shape, dtype, then values."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"{what}: expected {len(expected)} outputs, got one"
        assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{what}[{k}]", tol)
        return
    a = as_numpy(actual)
    e = np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape}, expected {e.shape}"
    assert a.dtype == e.dtype, f"{what}: dtype {a.dtype}, expected {e.dtype}"
    if e.dtype.kind == "f":
        rtol, atol = tol or _TOL[e.dtype]
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(a, e, err_msg=what)


@contextlib.contextmanager
def configuration(what):
    """`with configuration("add-3 float32"):` -- a failure inside says which configuration
    failed. One pytest item loops over a row variant's dtypes, sizes or operand forms (each
    item costs CI time), so the item's id alone no longer names the configuration."""
    try:
        yield
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from e
    except (Exception, pytest.fail.Exception) as e:
        raise AssertionError(f"{what}: {type(e).__name__}: {e}") from e


# ---------------------------------------------------------------------------------------
# Recording executed ops and checking their inference

class Call:
    """One eager op execution seen by the execution callback."""

    __slots__ = ("op", "attrs", "in_types", "out_types")

    def __init__(self, op, attrs, inputs, outputs):
        self.op = op
        self.attrs = dict(attrs)
        self.in_types = [(tuple(t.shape), t.dtype) for t in inputs]
        self.out_types = [(tuple(t.shape), t.dtype) for t in outputs]

    def __repr__(self):
        return f"<{self.op} {self.in_types} -> {self.out_types} {self.attrs}>"


@contextlib.contextmanager
def recording():
    """`with recording() as calls:` collects a Call for every eager op run inside."""
    calls = []

    def cb(op_name, name, attrs, inputs, outputs):
        calls.append(Call(op_name, attrs, inputs, outputs))
    df.add_execution_callback(cb)
    try:
        yield calls
    finally:
        df.remove_execution_callback(cb)


def infer_of(op_name, inputs, attrs=None):
    """The OpDef's inferred [(shape, DType)] for `inputs` (tensors, arrays, or (shape, dtype) pairs)."""
    shapes, dts = [], []
    for x in inputs:
        if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], dtypes.DType):
            s, d = x
        elif isinstance(x, Tensor):
            s, d = x.shape, x.dtype
        else:
            arr = np.asarray(x)
            s, d = arr.shape, dtypes.from_numpy(arr.dtype)
        shapes.append(tuple(s))
        dts.append(d)
    return registry.get(op_name).infer(shapes, dts, dict(attrs or {}))


def compatible(static, actual):
    """A static shape (None = unknown) admits `actual`."""
    return len(static) == len(actual) and all(s is None or s == a for s, a in zip(static, actual))


# Ops whose output sizes depend on input values (segment_sum: the largest id + 1): inference
# leaves those sizes None and must admit what the kernel gives. Op families add their names.
DATA_DEPENDENT_SIZES = set()


def check_call_inference(call):
    """Inference agrees with what the kernel produced: exactly, and with every size unknown."""
    got = infer_of(call.op, call.in_types, call.attrs)
    if call.op in DATA_DEPENDENT_SIZES:
        assert len(got) == len(call.out_types) and all(
            d is t and compatible(tuple(s), a) for (s, d), (a, t) in zip(got, call.out_types)), \
            f"{call.op}: inferred {got}, which does not admit the kernel's {call.out_types}"
    else:
        assert [(tuple(s), d) for s, d in got] == call.out_types, \
            f"{call.op}: inferred {got}, kernel gave {call.out_types} (attrs {call.attrs})"
    for k in range(len(call.in_types)):
        for d in range(len(call.in_types[k][0])):
            types = [(tuple(None if (j == k and i == d) else n for i, n in enumerate(s)), t)
                     for j, (s, t) in enumerate(call.in_types)]
            try:
                partial = infer_of(call.op, types, call.attrs)
            except errors.InvalidArgumentError as e:
                # allowed: an op may refuse unknown sizes it cannot handle, saying so
                assert "unknown" in str(e) and call.op in str(e), f"{call.op}: {e}"
                continue
            assert len(partial) == len(call.out_types), f"{call.op}: output count changed with a None size"
            for (ps, pd), (s, t) in zip(partial, call.out_types):
                assert pd is t and compatible(ps, s), \
                    f"{call.op}: with size {d} of input {k} unknown, inferred {ps} {pd.name} " \
                    f"which does not admit the actual {s} {t.name}"


# ---------------------------------------------------------------------------------------
# Gradients: tape versus central finite differences, all in float64

def as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def tape_vjp(fn, xs, cotangents, wrt):
    """Gradients of sum(out_k * w_k) w.r.t. xs[i] for i in wrt, from df.GradientTape (dense numpy)."""
    ts = [df.constant(x) for x in xs]
    with df.GradientTape() as tape:
        for i in wrt:
            tape.watch(ts[i])
        out = as_list(fn(*ts))
    grads = tape.gradient(out, [ts[i] for i in wrt],
                          output_gradients=[df.constant(w) for w in cotangents])
    return [np.zeros_like(xs[i]) if g is None else as_numpy(g) for g, i in zip(grads, wrt)]


def numeric_vjp(fn, xs, cotangents, wrt, eps=1e-6):
    """Central differences of sum(out_k * w_k), evaluated with the eager ops in float64."""
    def value(args):
        outs = as_list(fn(*[df.constant(a) for a in args]))
        return sum(float(np.sum(as_numpy(o).astype(np.float64) * w)) for o, w in zip(outs, cotangents))
    result = []
    for i in wrt:
        g = np.zeros_like(xs[i], dtype=np.float64)
        flat = g.reshape(-1)
        for j in range(xs[i].size):
            args = [x.copy() for x in xs]
            args[i].reshape(-1)[j] += eps
            hi = value(args)
            args[i].reshape(-1)[j] -= 2 * eps
            lo = value(args)
            flat[j] = (hi - lo) / (2 * eps)
        result.append(g)
    return result


def random_cotangents(fn, xs, seed=1):
    rng = np.random.default_rng(seed)
    outs = as_list(fn(*[df.constant(x) for x in xs]))
    return [rng.normal(size=np.shape(as_numpy(o))).astype(np.float64) for o in outs]


def check_gradient(fn, xs, wrt, rtol=1e-5, atol=1e-6):
    ws = random_cotangents(fn, xs)
    analytic = tape_vjp(fn, xs, ws, wrt)
    numeric = numeric_vjp(fn, xs, ws, wrt)
    for i, a, n in zip(wrt, analytic, numeric):
        assert a.shape == xs[i].shape, f"gradient of input {i} has shape {a.shape}, input {xs[i].shape}"
        np.testing.assert_allclose(a, n, rtol=rtol, atol=atol, err_msg=f"gradient w.r.t. input {i}")


def check_second_order(fn, xs, wrt, rtol=1e-5, atol=1e-6, seed=2):
    """Differentiate h(x, w) = <d/dx sum(f(x) * w), v> w.r.t. x and w, against differences of h.

    The `w` part checks the gradient's own gradient for linear ops (tile, pad, gather...).
    """
    rng = np.random.default_rng(seed)
    ws = random_cotangents(fn, xs)
    vs = [rng.normal(size=xs[i].shape) for i in wrt]

    def h_and_grads(xvals, wvals, want_grads):
        ts = [df.constant(x) for x in xvals]
        wt = [df.constant(w) for w in wvals]
        with df.GradientTape() as outer:
            outer.watch(ts)
            outer.watch(wt)
            with df.GradientTape() as inner:
                for i in wrt:
                    inner.watch(ts[i])
                out = as_list(fn(*ts))
            gs = inner.gradient(out, [ts[i] for i in wrt], output_gradients=wt)
            terms = [df.reduce_sum(df.multiply(df.convert_to_tensor(g), v)) for g, v in zip(gs, vs)
                     if g is not None]
            h = df.add_n(terms) if terms else None
        if h is None:
            return 0.0, None
        if not want_grads:
            return float(h), None
        with warnings.catch_warnings():     # integer inputs (indices) get None, with the tape's warning
            warnings.simplefilter("ignore", UserWarning)
            grads = outer.gradient(h, ts + wt)
        vals = xvals + wvals
        return float(h), [np.zeros_like(v) if g is None else as_numpy(g) for g, v in zip(grads, vals)]

    _, analytic = h_and_grads(xs, ws, True)
    if analytic is None:
        return
    allvals = list(xs) + list(ws)
    eps = 1e-6
    for k, a in enumerate(analytic):
        if k < len(xs) and (k not in wrt or xs[k].dtype.kind != "f"):
            continue
        num = np.zeros_like(allvals[k], dtype=np.float64)
        for j in range(allvals[k].size):
            for sign in (1, -1):
                vals = [v.copy() for v in allvals]
                vals[k].reshape(-1)[j] += sign * eps
                num.reshape(-1)[j] += sign * h_and_grads(vals[:len(xs)], vals[len(xs):], False)[0]
        num /= 2 * eps
        what = f"input {k}" if k < len(xs) else f"cotangent {k - len(xs)}"
        np.testing.assert_allclose(a, num, rtol=rtol, atol=atol, err_msg=f"second order w.r.t. {what}")


# ---------------------------------------------------------------------------------------
# A minimal symbolic builder: what the graph layer's builder does, minus the graph. Ops run
# their inference only, so gradient rules can be built with unknown (None) sizes.

class SymbolicTensor(Tensor):
    """A value-less tensor: static shape (None = unknown) and dtype."""

    __slots__ = ("shape", "dtype", "_id", "__weakref__")
    _ids = iter(range(10 ** 9, 10 ** 12))

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype
        self._id = next(SymbolicTensor._ids)

    def __repr__(self):
        return f"<sym {shape_rules.shape_str(self.shape)} {self.dtype.name}>"


class SymbolicBuilder:
    """Stands in for a graph while it is the thread's builder; records (op, attrs, ins, outs)."""

    def __init__(self):
        self.nodes = []

    def add_op(self, op, inputs, attrs, name=None):
        same = set(op.same_dtype or ())
        ins = [x._as_tensor() if hasattr(x, "_as_tensor") and not isinstance(x, Tensor) else x
               for x in inputs]
        # the conversion eager dispatch and graphs use (weak typing), making symbolic constants
        ins = convert_operands(op, ins, lambda x: isinstance(x, Tensor),
                               lambda x, dtype: self.constant(to_array(x, dtype)))
        if len(same) > 1:
            shape_rules.check_same(op.name, [ins[i].dtype for i in sorted(same)])
        if op.kinds is not None and ins:
            shape_rules.check_kinds(op.name, ins[0].dtype, op.kinds)
        out_types = op.infer([t.shape for t in ins], [t.dtype for t in ins], attrs)
        n = op.output_count(attrs, len(ins))
        assert len(out_types) == n, f"{op.name}: inference gave {len(out_types)} outputs, expected {n}"
        outs = [SymbolicTensor(s, d) for s, d in out_types]
        self.nodes.append((op.name, dict(attrs), ins, outs))
        return ins, outs

    def constant(self, arr, name=None):
        arr = np.asarray(arr)
        return SymbolicTensor(arr.shape, dtypes.from_numpy(arr.dtype))

    def capture(self, t):
        return SymbolicTensor(t.shape, t.dtype)

    @contextlib.contextmanager
    def building(self):
        saved = state.graph, state.tapes
        state.graph, state.tapes = self, []
        try:
            yield self
        finally:
            state.graph, state.tapes = saved


class OpView:
    """The `op` argument of a gradient function."""

    def __init__(self, type_, inputs, outputs, attrs):
        self.type, self.inputs, self.outputs, self.attrs = type_, inputs, outputs, attrs

    def get_attr(self, name):
        return self.attrs[name]


def check_symbolic_gradient(call, unknown):
    """Build `call`'s op and its gradient symbolically; gradient shapes/dtypes must fit the inputs.

    With `unknown`, every input size is None (as in a trace with a None signature).
    """
    opdef = registry.get(call.op)
    builder = SymbolicBuilder()
    with builder.building():
        ins = [SymbolicTensor(tuple(None for _ in s) if unknown else s, d) for s, d in call.in_types]
        try:
            _, outs = builder.add_op(opdef, ins, call.attrs)
        except errors.InvalidArgumentError as e:
            # allowed: an op may refuse unknown sizes it cannot handle, saying so
            assert unknown and "unknown" in str(e) and call.op in str(e), f"{call.op}: {e}"
            return
        for (s, d), o in zip(call.out_types, outs):
            assert o.dtype is d and compatible(o.shape, s), f"{call.op}: symbolic output {o} vs {s} {d.name}"
        if opdef.grad is None:
            return
        gs = [SymbolicTensor(o.shape, o.dtype) for o in outs]
        grads = opdef.grad(OpView(call.op, ins, outs, call.attrs), *gs)
    assert len(grads) == len(ins), f"{call.op}: gradient gave {len(grads)} entries for {len(ins)} inputs"
    for k, (g, x, (s, d)) in enumerate(zip(grads, ins, call.in_types)):
        if g is None:
            continue
        gshape = g.dense_shape if isinstance(g, IndexedSlices) else g.shape
        assert g.dtype is d, f"{call.op}: gradient {k} has dtype {g.dtype.name}, input is {d.name}"
        assert compatible(tuple(gshape), s), f"{call.op}: gradient {k} has shape {gshape}, input is {s}"
        if not unknown:
            assert tuple(gshape) == tuple(s), f"{call.op}: gradient {k} has shape {gshape}, input is {s}"


# ---------------------------------------------------------------------------------------
# The table's vocabulary: rows, variants and the variant builders every op family uses.
# The core table is tests/test_ops.py; later families keep theirs in tests/op_rows_*.py
# (each defines ROWS, and optionally EXCLUDED and API_ND), which test_ops.py gathers.

class V:
    """One input variant of a row: input specs, keyword args, optional dtypes override."""

    def __init__(self, args, kw=None, dtypes=None, grad=True):
        self.args = tuple(args)
        self.kw = dict(kw or {})
        self.dtypes = dtypes
        self.grad = grad

    def __repr__(self):
        shapes = ",".join("x".join(map(str, a.shape)) or "s" for a in self.args)
        kw = ",".join(f"{k}={v!r}" for k, v in self.kw.items())
        return f"{shapes}{'|' + kw if kw else ''}"


class Row:
    """One op of the table.

    grad: True  -> gradients checked against finite differences;
          False -> declared non-differentiable: the tape must give None;
          "skip" -> checked elsewhere (reason in `note`).
    also: other registered ops this row must execute (internal helpers of its gradient).
    """

    def __init__(self, op, fn, ref, variants, dtypes=FLOATS, grad=True, also=(), second=False,
                 tol=None, note=""):
        self.op, self.fn, self.ref = op, fn, ref
        self.variants = list(variants)
        self.dtypes = tuple(dtypes)
        self.grad = grad
        self.also = tuple(also)
        self.second = second
        self.tol = tol
        self.note = note

    def dtypes_of(self, v):
        return v.dtypes or self.dtypes


def via_float64(f):
    """Reference computed in float64, rounded to the input dtype."""
    return lambda x, **kw: np.asarray(f(x.astype(np.float64), **kw)).astype(x.dtype)


def adjoint_of(linear_fn, in_shape, g):
    """J^T g for a linear numpy function, built column by column from basis vectors."""
    n = int(np.prod(in_shape))
    cols = []
    for k in range(n):
        e = np.zeros(n)
        e[k] = 1
        cols.append(np.asarray(linear_fn(e.reshape(in_shape)), np.float64).reshape(-1))
    jac = np.stack(cols, 1) if cols else np.zeros((np.size(g), 0))
    return (jac.T @ np.asarray(g, np.float64).reshape(-1)).reshape(in_shape).astype(g.dtype)


def internal_op(name):
    """A caller for an internal op: inputs positional, attrs as keywords."""
    op = registry.get(name)

    def call(*xs, **attrs):
        return run_op(op, xs, attrs)
    return call


UNARY = [(), (5,), (3, 4)]
BINARY = [((), ()), ((4,), (4,)), ((2, 3), (2, 3)), ((2, 3), (3,)), ((3, 1), (1, 4)), ((), (2, 3)),
          ((2, 1, 3), (4, 1))]


def un(kind="normal"):
    return [V([A(s, kind)]) for s in UNARY]


def bin_(kx="normal", ky="normal"):
    return [V([A(a, kx), A(b, ky)]) for a, b in BINARY]


def red(kind="normal"):
    return [V([A((), kind)]), V([A((5,), kind)]), V([A((2, 3), kind)], dict(axis=0)),
            V([A((2, 3), kind)], dict(axis=1, keepdims=True)), V([A((2, 3, 4), kind)], dict(axis=(0, 2))),
            V([A((2, 3, 4), kind)], dict(axis=-1, keepdims=True)), V([A((2, 3), kind)], dict(keepdims=True)),
            V([A((2, 3), kind)], dict(axis=()))]


def idx(value, dtype=df.int32):
    return A(np.shape(value), value=np.asarray(value), dtype=dtype)
