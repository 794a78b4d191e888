"""The MLP step built by hand as a graph (forward + graph-level backward) equals the eager tape."""
import numpy as np

import defun as df
from defun.graph.executor import compile_graph
from defun.graph.gradients import build_backward
from defun.graph.input_gradients import DenseGrad
from defun.graph.ir import Graph


def _mlp_loss(x, labels, w1, b1, w2, b2):
    h = df.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    return df.reduce_mean(df.sparse_softmax_cross_entropy_with_logits(labels, logits))


def _params(rng):
    return [rng.standard_normal((8, 16)) * 0.3, np.zeros(16), rng.standard_normal((16, 4)) * 0.3,
            np.zeros(4)]


def test_hand_built_mlp_step_matches_eager_tape():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8))
    labels = np.array([0, 3, 1, 2, 3], np.int32)
    params = _params(rng)

    g = Graph("mlp_loss")
    with g.building():
        xp = g.placeholder((None, 8), df.float64)
        lp = g.placeholder((None,), df.int32)
        ps = [g.placeholder(p.shape, df.float64) for p in params]
        loss = _mlp_loss(xp, lp, *ps)
    g.finalize([loss])

    bw = build_backward(g)
    # The backward part reads forward intermediates (e.g. the tanh output): side outputs.
    assert bw.side_outputs, "the MLP backward must read forward intermediates"
    assert all(t.node.graph is g for t in bw.side_outputs)
    forward = compile_graph(g, g.outputs + bw.side_outputs)
    fwd = forward(x, labels, *params)
    loss_graph, side = fwd[0], fwd[1:]
    feed = [np.asarray(1.0)]
    for kind, v in bw.capture_sources:
        feed.append([x, labels, *params][v] if kind == "input" else side[v] if kind == "side" else np.asarray(v))
    grads = compile_graph(bw.graph)(*feed)

    tensors = [df.constant(p) for p in params]
    with df.GradientTape() as tape:
        for t in tensors:
            tape.watch(t)
        loss_eager = _mlp_loss(df.constant(x), df.constant(labels), *tensors)
    eager_grads = tape.gradient(loss_eager, tensors)

    np.testing.assert_allclose(loss_graph, np.asarray(loss_eager), rtol=1e-12)
    assert bw.input_grads[0] is not None and bw.input_grads[1] is None  # x yes, int labels no
    for k, eg in enumerate(eager_grads):
        spec = bw.input_grads[2 + k]
        assert isinstance(spec, DenseGrad)
        np.testing.assert_allclose(grads[spec.output], np.asarray(eg), rtol=1e-10, atol=1e-12)
