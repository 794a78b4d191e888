"""The machinery of tests/test_composition_sweep.py: the seven transformations, applied to an
op-table row's function, and the references they are checked against.

A function here takes tensors and returns a LIST of tensors (the row's float or complex
outputs). Every transformation maps such a function to another with the same inputs, so
any sequence of them composes:
  defun   df.defun(f)                       remat  df.defun(f, rematerialize=True)
  numba   df.defun(f, backend="numba")      json   export_json(include_backward=True), reloaded
  vmap    df.vmap(f) (every input batched)
  grad    the tape's gradients of a fixed real loss of f's outputs w.r.t. its float inputs
  fwd     df.ForwardAccumulator's JVPs of f's outputs along fixed tangents
A composition is written outermost first: ("grad", "vmap", "defun") is grad(vmap(defun(f))).

The reference of a composition drops the four graph transformations (they must not change
a value) and runs vmap as a Python loop of examples stacked with df.stack, all eagerly: its
"skeleton" of vmap/grad/fwd. Each skeleton is itself checked once per (row, variant, dtype):
its outermost grad or fwd against central differences of the next one in (float64 and
complex128), and, for the rows with a jax equivalent (JAX below), against the same
composition of jax.vmap / jax.grad / jax.jvp.
"""
import json
import zlib

import numpy as np

import defun as df
from opcheck import make_inputs

GRAPH_TRANSFORMS = ("defun", "remat", "numba", "json")
TRANSFORMS = ("defun", "vmap", "grad", "fwd", "remat", "json", "numba")
B = 2                                   # examples in a vmap batch

C64, C128 = df.complex64, df.complex128


def is_diff(dtype):
    return dtype.is_floating or dtype.is_complex


# ---------------------------------------------------------------------------------------
# Inputs, tangents, the loss

def draw_inputs(v, dtype, seed):
    """The variant's inputs (numpy) in `dtype`: complex ones take a real part from the row's
    domain (its kind: positive, unit...) and an imaginary part half that size."""
    if not dtype.is_complex:
        return make_inputs(v.args, dtype, seed)
    real = C64.real_dtype if dtype is C64 else C128.real_dtype
    re = make_inputs(v.args, real, seed)
    im = make_inputs(v.args, real, seed + 1000)
    return [(r + 0.5j * i).astype(dtype.np) if a.is_float_input else r
            for a, r, i in zip(v.args, re, im)]


def tangent(shape, dtype):
    """A fixed tangent for an input of this shape and dtype (the same for df and jax)."""
    rng = np.random.default_rng(zlib.crc32(repr(tuple(shape)).encode()))
    t = rng.normal(size=shape)
    if dtype.is_complex:
        t = t + 1j * rng.normal(size=shape)
    return t.astype(dtype.np)


def loss(outs):
    """A real scalar of a list of outputs: sum(sin(o)), sum(sin(re o) + cos(im o)) if complex."""
    total = 0.0
    for o in outs:
        if o.dtype.is_complex:
            total = total + df.reduce_sum(df.sin(df.real(o))) + df.reduce_sum(df.cos(df.imag(o)))
        else:
            total = total + df.reduce_sum(df.sin(o))
    return total


def jax_loss(outs):
    """`loss` in jax."""
    import jax.numpy as jnp     # a test reference, imported when a jax check runs
    total = 0.0
    for o in outs:
        if jnp.iscomplexobj(o):
            total = total + jnp.sum(jnp.sin(jnp.real(o))) + jnp.sum(jnp.cos(jnp.imag(o)))
        else:
            total = total + jnp.sum(jnp.sin(o))
    return total


def outputs_of(out):
    """The float and complex tensors of a row's result (a tensor, tuple or list), as a list."""
    flat = []
    for o in out if isinstance(out, (tuple, list)) else [out]:
        if isinstance(o, (tuple, list)):
            flat.extend(outputs_of(o))
            continue
        t = df.convert_to_tensor(o)
        if is_diff(t.dtype):
            flat.append(t)
    return flat


def base_function(row, v):
    return lambda *ts: outputs_of(row.fn(*ts, **v.kw))


# ---------------------------------------------------------------------------------------
# The transformations

def _as_tensors(xs):
    return [df.convert_to_tensor(x) for x in xs]


def _graph(fn, **options):
    d = df.defun(fn, **options)
    return lambda *xs: list(d(*xs))


def _json(fn):
    d = df.defun(fn)

    def run(*xs):
        cf = d.get_concrete_function(*xs)
        doc = json.loads(json.dumps(df.export_json(cf, include_backward=True)))
        return list(df.load_json(doc)(*xs))
    return run


def _grad(fn):
    def grads(*xs):
        xs = _as_tensors(xs)
        wrt = [x for x in xs if is_diff(x.dtype)]
        with df.GradientTape() as tape:
            tape.watch(wrt)
            value = loss(fn(*xs))
        got = tape.gradient(value, wrt, unconnected_gradients="zero")
        return [df.convert_to_tensor(g) for g in got]
    return grads


def _fwd(fn):
    def jvps(*xs):
        xs = _as_tensors(xs)
        wrt = [x for x in xs if is_diff(x.dtype)]
        ts = [df.ones_like(x) if None in tuple(x.shape) else df.constant(tangent(x.shape, x.dtype)) for x in wrt]
        with df.ForwardAccumulator(wrt, ts) as acc:
            outs = fn(*xs)
        return [df.convert_to_tensor(j) for j in acc.jvp(outs, unconnected_gradients="zero")]
    return jvps


def _vmap(fn):
    return lambda *xs: list(df.vmap(fn)(*xs))


def _loop(fn):
    """vmap's reference: the examples one by one, stacked (df ops, so tapes see through)."""
    def run(*xs):
        xs = _as_tensors(xs)
        per = [fn(*[x[b] for x in xs]) for b in range(xs[0].shape[0])]
        return [df.stack([p[k] for p in per]) for k in range(len(per[0]))]
    return run


WRAP = {"defun": _graph, "remat": lambda f: _graph(f, rematerialize=True),
        "numba": lambda f: _graph(f, backend="numba"), "json": _json,
        "vmap": _vmap, "grad": _grad, "fwd": _fwd}
REFERENCE_WRAP = {"vmap": _loop, "grad": _grad, "fwd": _fwd}


def compose(comp, fn, wrap=WRAP):
    for t in reversed(comp):
        fn = wrap[t](fn) if t in wrap else fn
    return fn


def skeleton(comp):
    return tuple(t for t in comp if t not in GRAPH_TRANSFORMS)


def inputs_for(comp, v, dtype):
    if "vmap" in comp:
        examples = [draw_inputs(v, dtype, seed) for seed in range(B)]
        return [np.stack(xs) for xs in zip(*examples)]
    return draw_inputs(v, dtype, 0)


def run(fn, xs):
    return [np.asarray(o.numpy()) for o in fn(*[df.constant(x) for x in xs])]


# ---------------------------------------------------------------------------------------
# Checks of a skeleton: finite differences of its outermost grad/fwd, and jax

def finite_differences(comp, base, xs, eps=1e-6):
    """The outermost grad or fwd of `comp` (a skeleton) by central differences of the rest,
    evaluated eagerly; None when the outermost is vmap (a loop: nothing to difference)."""
    if not comp or comp[0] == "vmap":
        return None
    inner = compose(comp[1:], base, REFERENCE_WRAP)
    value = lambda args: run(inner, args)           # noqa: E731
    diff = [i for i, x in enumerate(xs) if np.asarray(x).dtype.kind in "fc"]
    if comp[0] == "fwd":
        ts = [tangent(xs[i].shape, df.as_dtype(xs[i].dtype)) for i in diff]
        hi = value([x + eps * ts[diff.index(i)] if i in diff else x for i, x in enumerate(xs)])
        lo = value([x - eps * ts[diff.index(i)] if i in diff else x for i, x in enumerate(xs)])
        return [(h - l) / (2 * eps) for h, l in zip(hi, lo)]
    scalar = lambda args: float(loss([df.constant(o) for o in value(args)]))     # noqa: E731
    grads = []
    for i in diff:
        g = np.zeros(xs[i].shape, xs[i].dtype)
        for j in range(xs[i].size):
            for unit in ((1, 1j) if np.iscomplexobj(xs[i]) else (1,)):
                step = np.zeros(xs[i].size, xs[i].dtype)
                step[j] = eps * unit
                args = list(xs)
                args[i] = xs[i] + step.reshape(xs[i].shape)
                hi = scalar(args)
                args[i] = xs[i] - step.reshape(xs[i].shape)
                g.reshape(-1)[j] += unit * (hi - scalar(args)) / (2 * eps)
        grads.append(g)
    return grads


def _jax_compose(comp, jf, n_inputs):
    import jax      # a test reference, imported when a jax check runs
    import jax.numpy as jnp     # the same
    for t in reversed(comp):
        if t == "vmap":
            jf = (lambda f: lambda *xs: list(jax.vmap(lambda *a: tuple(f(*a)))(*xs)))(jf)
        elif t == "grad":
            jf = (lambda f: lambda *xs: [jnp.conj(g) for g in jax.grad(
                lambda *a: jax_loss(f(*a)), argnums=tuple(range(n_inputs)))(*xs)])(jf)
        else:
            jf = (lambda f: lambda *xs: list(jax.jvp(
                lambda *a: tuple(f(*a)), tuple(xs),
                tuple(jnp.asarray(tangent(x.shape, df.as_dtype(np.dtype(x.dtype)))) for x in xs))[1]))(jf)
    return jf


def jax_reference(comp, jfn, kw, xs):
    """The skeleton `comp` computed by jax (x64 on inside this call only), as numpy arrays."""
    import jax      # a test reference, imported when a jax check runs
    with jax.enable_x64(True):
        base = lambda *a: [jfn(*a, **kw)]           # noqa: E731
        f = _jax_compose(comp, base, len(xs))
        return [np.asarray(o) for o in f(*[jax.numpy.asarray(x) for x in xs])]


# ---------------------------------------------------------------------------------------
# jax equivalents of op-table rows (every input differentiable): op -> fn(*xs, **row kwargs)

def _jnp(name):
    def f(*xs, **kw):
        import jax.numpy as jnp     # a test reference, imported when a jax check runs
        return getattr(jnp, name)(*xs, **kw)
    return f


def _jax(path):
    def f(*xs, **kw):
        import jax      # a test reference, imported when a jax check runs
        fn = jax
        for part in path.split("."):
            fn = getattr(fn, part)
        return fn(*xs, **kw)
    return f


def _axes(kw):
    kw = dict(kw)
    if isinstance(kw.get("axis"), list):
        kw["axis"] = tuple(kw["axis"])
    return kw


def _reduce(name):
    return lambda x, **kw: _jnp(name)(x, **_axes(kw))


def _matmul(a, b, transpose_a=False, transpose_b=False):
    import jax.numpy as jnp     # a test reference, imported when a jax check runs
    a = jnp.swapaxes(a, -1, -2) if transpose_a else a
    b = jnp.swapaxes(b, -1, -2) if transpose_b else b
    return jnp.matmul(a, b)


def _sqdiff(x, y):
    return (x - y) ** 2


def _solve(a, b, adjoint=False):
    import jax.numpy as jnp     # a test reference, imported when a jax check runs
    return jnp.linalg.solve(jnp.conj(jnp.swapaxes(a, -1, -2)) if adjoint else a, b)


def _rsqrt(x):
    return _jax("lax.rsqrt")(x)


JAX = {
    **{op: _jnp(op) for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "negative",
                               "square", "sqrt", "exp", "log", "log1p", "tanh", "abs", "sin", "cos",
                               "tan", "sinh", "cosh", "expm1", "hypot", "logaddexp", "reciprocal",
                               "log2", "log10")},
    "pow": _jnp("power"), "asin": _jnp("arcsin"), "acos": _jnp("arccos"), "atan": _jnp("arctan"),
    "asinh": _jnp("arcsinh"), "acosh": _jnp("arccosh"), "atanh": _jnp("arctanh"), "atan2": _jnp("arctan2"),
    "sigmoid": _jax("nn.sigmoid"), "relu": _jax("nn.relu"), "softplus": _jax("nn.softplus"),
    "erf": _jax("scipy.special.erf"), "rsqrt": _rsqrt, "squared_difference": _sqdiff,
    "reduce_sum": _reduce("sum"), "reduce_mean": _reduce("mean"), "reduce_max": _reduce("max"),
    "reduce_min": _reduce("min"), "reduce_prod": _reduce("prod"),
    "reduce_logsumexp": lambda x, **kw: _jax("scipy.special.logsumexp")(x, **_axes(kw)),
    "matmul": _matmul, "softmax": _jax("nn.softmax"), "log_softmax": _jax("nn.log_softmax"),
    "transpose": lambda x, perm=None: _jnp("transpose")(x, perm),
    "reshape": lambda x, shape: _jnp("reshape")(x, tuple(shape)),
    "det": _jax("numpy.linalg.det"), "inv": _jax("numpy.linalg.inv"),
    "solve": _solve,
}
