"""vmap composed with defun and tapes, swept over op rows of the registry's table and control flow.

For each case (an op row of tests/test_ops.py's table, taken by name: elementwise,
reductions, matmul, reshapes and transposes, softmax; and hand-written scan, while_loop
and cond functions), the batched result and the gradient of `sum(sin(f(x)) * c)` with
respect to every float input, through each composition:

    eager vmap | defun(vmap) | vmap(defun) | defun(vmap) with the batch size unknown
    (input_signature with None batch dims) | defun(vmap) with every size unknown (as a
    relaxed trace may have them); the last two: one trace run at batches 0, 1 and 3

are compared with a Python loop of eager calls (and, per example, eager tape gradients: None
only where no example's gradient reaches the input, so batch 0 gives zeros, not None); with
the batch size unknown, a second mapped argument of 1 example against 3 is refused;
and `vmap(gradients_function(...))` through the same compositions (per-example gradients)
against each example's gradient. Two items per case; the sweep runs in ~15 s.
"""
import numpy as np
import pytest

import defun as df
from opcheck import as_numpy, configuration, make_inputs

import op_table as table

B = 3
OPS = ["add", "multiply", "divide", "maximum", "exp", "tanh", "sigmoid", "where", "reduce_sum",
       "reduce_mean", "reduce_max", "reduce_logsumexp", "matmul", "einsum", "reshape", "transpose",
       "expand_dims", "squeeze", "concat", "strided_slice", "broadcast_to", "tile", "pad", "gather",
       "softmax", "log_softmax", "cumsum", "norm", "clip_by_value", "scatter_nd", "unsorted_segment_sum"]


def _scan(x, w):
    return df.scan(lambda a, e: a * df.tanh(e) + w, x, initializer=df.zeros_like(w))


def _while(x, w):
    n = df.cast(df.reduce_sum(df.abs(x)) * 2.0, df.int32) + 1       # a per-example trip count
    return df.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, df.sin(a) * w + x[0]), (0, w))[1]


def _cond(x, w):
    return df.cond(df.reduce_sum(x) > 0.0, lambda: df.exp(x) * w, lambda: x * x - w)


def _cond_shared(x, w):
    return df.cond(df.reduce_sum(w) > 0.0, lambda: df.exp(x) * w, lambda: x * x - w)


CONTROL = {"scan": (_scan, [(4, 2), (2,)]), "while_loop": (_while, [(3,), (3,)]),
           "cond": (_cond, [(3,), (3,)]), "cond_shared_predicate": (_cond_shared, [(3,), (3,)])}


# ops that need per-example sizes known while tracing, batched or not (squeeze with axis None:
# the rank; unsorted_segment_sum: the shape of the ids)
RANK_NEEDED = {"squeeze", "unsorted_segment_sum"}
SHARED = ["add", "multiply", "maximum", "where", "matmul", "einsum", "concat", "pad", "gather", "clip_by_value"]


def _cases():
    """Every op with all inputs mapped; those in SHARED also with the first mapped alone."""
    out = [pytest.param(name, False, id=name) for name in OPS + list(CONTROL)]
    return out + [pytest.param(name, True, id=f"{name}-first-mapped") for name in SHARED]


def _case(name, first_only=False):
    """(fn of one example, per-example inputs per seed, which inputs are mapped, float inputs);
    `first_only`: the other inputs shared by every example (in_axes None)."""
    rng = np.random.default_rng(len(name))
    if name in CONTROL:
        fn, shapes = CONTROL[name]
        exs = [[rng.normal(size=s) for s in shapes] for _ in range(B)]
        mapped = (0, None) if name == "cond_shared_predicate" else (0, 0)
        return fn, exs, mapped, [0, 1]
    row = table.ROW_BY_OP[name]
    # the variant of highest rank (the first such): scalars say little about batching
    v = max((v for v in row.variants if v.args), key=lambda v: (v.grad, sum(len(a.shape) for a in v.args)))
    dt = df.float64 if df.float64 in row.dtypes_of(v) else row.dtypes_of(v)[0]
    exs = [make_inputs(v.args, dt, seed) for seed in range(B)]
    floats = [i for i, a in enumerate(v.args) if a.is_float_input] if row.grad is True and v.grad else []
    mapped = (0,) + (None if first_only else 0,) * (len(v.args) - 1)
    return (lambda *xs: row.fn(*xs, **v.kw)), exs, mapped, floats


def _loss_of(out, c):
    return df.reduce_sum(df.sin(out) * c)


def _reference(fn, exs, mapped, floats, cs):
    """The loop of eager calls: results stacked, per-example tape gradients (shared inputs' summed)."""
    outs, grads = [], []
    for i in range(len(exs)):
        xs = [df.constant(x if m is not None else exs[0][k]) for k, (x, m) in enumerate(zip(exs[i], mapped))]
        with df.GradientTape() as tape:
            tape.watch(xs)
            out = fn(*xs)
            loss = _loss_of(out, cs[i])
        outs.append(as_numpy(out))
        grads.append([as_numpy(g) if g is not None else None for g in tape.gradient(loss, [xs[k] for k in floats])])
    return outs, grads


def _stack(rows, like):
    """`rows` stacked (none: an empty batch of `like`'s shape and dtype)."""
    return np.stack(rows) if rows else np.zeros((0,) + np.shape(like), np.asarray(like).dtype)


def _batch(exs, mapped, n):
    return [_stack([ex[k] for ex in exs[:n]], exs[0][k]) if m is not None else exs[0][k]
            for k, m in enumerate(mapped)]


def _close(got, want, what):
    got = as_numpy(got)
    assert got.shape == np.shape(want), f"{what}: shape {got.shape}, expected {np.shape(want)}"
    tol = 1e-9 if got.dtype == np.float64 else 1e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def _expected_grads(grads, mapped, floats, n, template):
    out = []
    for j, k in enumerate(floats):
        per = [g[j] if g[j] is not None else np.zeros_like(template[k]) for g in grads[:n]]
        out.append(_stack(per, template[k]) if mapped[k] is not None else
                   np.sum(per, axis=0) if per else np.zeros_like(template[k]))
    return out


def _compositions(fn, mapped, template):
    vm = df.vmap(fn, in_axes=mapped)
    sig = [df.TensorSpec((None,) + np.shape(x) if m is not None else np.shape(x), df.as_dtype(np.asarray(x).dtype))
           for x, m in zip(template, mapped)]
    every = [df.TensorSpec((None,) * len(s.shape), s.dtype) for s in sig]
    return {"eager vmap": vm, "defun(vmap)": df.defun(vm), "vmap(defun)": df.vmap(df.defun(fn), in_axes=mapped),
            "defun(vmap), batch size unknown": df.defun(vm, input_signature=sig),
            "defun(vmap), every size unknown": df.defun(vm, input_signature=every)}


@pytest.mark.parametrize("name,first_only", _cases())
def test_vmap_compositions_match_the_loop(name, first_only):
    fn, exs, mapped, floats = _case(name, first_only)
    cs = [np.random.default_rng(i).normal(size=np.shape(as_numpy(fn(*[df.constant(x) for x in exs[0]]))))
          for i in range(B)]
    outs, grads = _reference(fn, exs, mapped, floats, cs)
    for what, composed in _compositions(fn, mapped, exs[0]).items():
        if what.startswith("defun(vmap), every") and name in RANK_NEEDED:
            continue
        for n in ((0, 1, B) if "unknown" in what else (0, B)):
            with configuration(f"{name}, {what}, batch {n}"):
                batch = _batch(exs, mapped, n)
                c = _stack(cs[:n], cs[0])
                got = composed(*batch)
                _close(got, _stack(outs[:n], outs[0]), "values")
                if not floats:
                    continue
                ts = [df.constant(x) for x in batch]
                with df.GradientTape() as tape:
                    tape.watch(ts)
                    loss = df.reduce_sum(df.sin(composed(*ts)) * c)
                got_g = tape.gradient(loss, [ts[k] for k in floats])
                for j, (k, g, want) in enumerate(zip(floats, got_g, _expected_grads(grads, mapped, floats, n, exs[0]))):
                    # None only where no example's gradient reaches the input (batch 0 included)
                    assert g is not None or all(gr[j] is None for gr in grads), f"gradient of input {k}: None"
                    _close(g if g is not None else np.zeros_like(want), want, f"gradient of input {k}")
        if "unknown" in what and sum(m is not None for m in mapped) > 1:
            with configuration(f"{name}, {what}, mapped batch sizes 3 and 1"):
                batch = _batch(exs, mapped, B)
                k = [i for i, m in enumerate(mapped) if m is not None][1]
                batch[k] = batch[k][:1]
                with pytest.raises(df.errors.InvalidArgumentError, match=f"argument leaf {k} has 1 examples"):
                    composed(*batch)


@pytest.mark.parametrize("name,first_only", _cases())
def test_per_example_gradients_match_the_loop(name, first_only):
    """vmap of the gradient function (the gradient's own ops batched, cond/while/scan
    gradients included) through the same compositions, against each example's gradient."""
    fn, exs, mapped, floats = _case(name, first_only)
    assert floats, f"{name}: every case has a float input"
    grad = df.gradients_function(lambda *xs: df.reduce_sum(df.sin(fn(*xs))), params=floats)
    per = [[as_numpy(g) for g in grad(*[df.constant(x if m is not None else exs[0][k])
                                        for k, (x, m) in enumerate(zip(ex, mapped))])] for ex in exs]
    for what, composed in _compositions(grad, mapped, exs[0]).items():
        if what.startswith("defun(vmap), every") and name in RANK_NEEDED:
            continue
        for n in ((0, 1, B) if "unknown" in what else (0, B)):
            with configuration(f"{name}, per-example gradients, {what}, batch {n}"):
                got = composed(*_batch(exs, mapped, n))
                for j, k in enumerate(floats):
                    _close(got[j], _stack([p[j] for p in per[:n]], exs[0][k]), f"gradient of input {k}")
