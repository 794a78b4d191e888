"""Issue 28 (round 4), where documents and exports meet other features: the backward the
command line draws for a loaded document (item 8), exports taken while another thread
trains (item 9). Reference numbers: exact derivatives, the in-memory function's drawing."""
import contextlib
import io
import json
import re
import threading

import numpy as np
import pytest

import defun as df
from defun.graph_function import GraphFunction


def _cli(*args):
    from defun.cli import main      # the command line in this process (its own import cost)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in args])
    assert code in (0, None), out.getvalue()
    return out.getvalue()


# ---------------------------------------------------------------------------------------
# Item 8: the backward rebuilt from a loaded document leaves out the gradient of a variable
# read only inside a cond or a while (`cf.to_dot(backward=True)` shows it): a called
# function's resource inputs had no value type, so no gradient flowed to them.

def _loop_and_branch():
    w = df.Variable(np.float32(2.0), name="w")
    v = df.Variable(np.float32(3.0), name="v")

    @df.defun(input_signature=[df.TensorSpec((), df.float32)])
    def f(x):
        y = df.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * w), [df.constant(0), x])[1]
        return df.cond(y > 0, lambda: y * v, lambda: y)
    return f.get_concrete_function()


def _gradient_labels(dot):
    return sorted(re.findall(r"d/d\w+", dot))


def test_cli_draws_the_gradients_of_variables_read_inside_cond_and_while(tmp_path):
    cf = _loop_and_branch()
    path = tmp_path / "f.json"
    df.export_json(cf, str(path))
    want = _gradient_labels(cf.to_dot(backward=True))
    assert want == ["d/dv", "d/dw", "d/dx"]
    _cli("dot", path, "--backward", "-o", tmp_path / "f.dot")
    assert _gradient_labels((tmp_path / "f.dot").read_text()) == want       # was ["d/dx"]
    shown = _cli("show", path, "--backward")
    backward = shown[shown.index("# backward"):]
    assert re.search(r"-> \(f32\[\], f32\[\], f32\[\]\):", backward), backward    # d/dx, d/dw, d/dv


def test_a_loaded_documents_rebuilt_backward_gives_the_variables_exact_gradients(tmp_path):
    # f = x w^3 v at x = 1.5, w = 2, v = 3: exact d/dx = w^3 v = 24, d/dw = 3 x w^2 v = 54,
    # d/dv = x w^3 = 12 (the rebuilt backward gave 24, None, None)
    cf = _loop_and_branch()
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
    graph = loaded.graph
    value, grads = GraphFunction.of(graph).first_order().value_and_gradients(
        [df.constant(np.float32(1.5))] + list(graph.captured_values))
    assert float(value) == 36.0
    assert [None if g is None else float(g) for g in grads] == [24.0, 54.0, 12.0]


# ---------------------------------------------------------------------------------------
# Item 9: an export taken while another thread trains holds one step's values (12-22 of 60
# exports mixed two steps: each variable was read when the writer reached it).

@pytest.fixture
def tight_switching():
    """Switch threads every microsecond (the default is 5 ms): races show up at once."""
    import sys      # only this fixture changes the interpreter's switch interval
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _values_of_export(kind, cf, n):
    """(w, b) as the export `kind` holds them."""
    if kind == "json":
        loaded = df.load_json(json.loads(json.dumps(df.export_json(cf))))
        return np.asarray(loaded.variables["w"]), np.asarray(loaded.variables["b"])
    if kind == "numpy":
        ns = {}
        exec(df.export_numpy_source(cf), ns)     # noqa: S102 (our own export)
        b = ns["forward"](np.zeros(n, np.float32))[0]
        return ns["forward"](np.ones(n, np.float32))[0] - b, b
    numpy_helper = pytest.importorskip("onnx.numpy_helper")
    inits = {i.name: numpy_helper.to_array(i) for i in df.export_onnx(cf).graph.initializer}
    return inits["w"], inits["b"]


@pytest.mark.parametrize("kind", ["json", "numpy", "onnx"])
def test_exports_beside_a_training_thread_hold_one_step(kind, tight_switching):
    n = 20000
    w = df.Variable(np.zeros(n, np.float32), name="w")
    b = df.Variable(np.zeros(n, np.float32), name="b")
    opt = df.optimizers.SGD(1.0)

    @df.defun
    def step():                     # one compiled call: w and b move together
        w.assign_add(df.ones([n]))
        b.assign_add(df.ones([n]))

    def eager_step():               # one optimizer step: the same, eagerly
        opt.apply_gradients([(-df.ones([n]), w), (-df.ones([n]), b)])

    @df.defun(input_signature=[df.TensorSpec([n], df.float32)])
    def predict(x):
        return x * w + b
    cf = predict.get_concrete_function()
    stop = threading.Event()

    def train():
        k = 0
        while not stop.is_set():
            (step if k % 2 else eager_step)()
            k += 1
    trainer = threading.Thread(target=train)
    trainer.start()
    mixed = []
    try:
        for k in range(20):
            wv, bv = _values_of_export(kind, cf, n)
            if wv[0] != bv[0]:
                mixed.append((k, float(wv[0]), float(bv[0])))
    finally:
        stop.set()
        trainer.join()
    assert float(w.numpy()[0]) > 0 and not mixed, f"exports holding two steps (export, w, b): {mixed}"
