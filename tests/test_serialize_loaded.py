"""Loaded functions: the gradient comes from the document's backward (docs/format.md), and a
returned variable comes back as its value."""
import base64
import copy
import json

import numpy as np
import pytest

import defun as df
from defun_helpers import nested_gradients


# ---------------------------------------------------------------------------------------
# A loaded function's gradient comes from the document's backward (docs/format.md)

def _with_constant(doc, function, old, new):
    """`doc` with the float64 constant `old` of function `function` replaced by `new`."""
    doc = copy.deepcopy(doc)
    (fd,) = [f for f in doc["functions"] if f["name"] == function]
    hits = [n for n in fd["nodes"] if n["op"] == "const" and
            base64.b64decode(n["attrs"]["value"]["data"]) == np.float64(old).tobytes()]
    assert len(hits) == 1, hits
    hits[0]["attrs"]["value"]["data"] = base64.b64encode(np.float64(new).tobytes()).decode()
    return doc


def _gradients(fn, x, persistent=False):
    t = df.constant(x)
    with df.GradientTape(persistent=persistent) as tape:
        tape.watch(t)
        y = fn(t)
    return y, tape.gradient(y, t)


def test_a_loaded_function_is_differentiated_by_the_backward_in_its_document():
    # before: the gradient was derived from the forward, whatever the backward said
    x = np.array([0.1, 0.2, 0.7])
    cf = df.defun(lambda x: df.reduce_sum(df.sin(x) * 3.0)).get_concrete_function(df.constant(x))
    doc = json.loads(json.dumps(df.export_json(cf, include_backward=True)))
    edited = df.load_json(_with_constant(doc, "lambda_grad", 3.0, 4.0))   # d/dx: 4 cos x now
    for route in ("tape", "persistent tape", "inside a defun"):
        if route == "inside a defun":
            y, g = _gradients(df.defun(lambda t: edited(t) * 1.0), x)
        else:
            y, g = _gradients(edited, x, persistent=route == "persistent tape")
        np.testing.assert_allclose(y.numpy(), 3.0 * np.sin(x).sum(), rtol=1e-12)   # forward as written
        np.testing.assert_allclose(g.numpy(), 4.0 * np.cos(x), rtol=1e-12, err_msg=route)
    np.testing.assert_allclose(_gradients(df.load_json(doc), x)[1].numpy(), 3.0 * np.cos(x), rtol=1e-12)
    # a document without a backward: the gradient is derived from its forward, as before
    plain = df.load_json(df.export_json(cf))
    np.testing.assert_allclose(_gradients(plain, x)[1].numpy(), 3.0 * np.cos(x), rtol=1e-12)


def test_a_custom_gradient_exported_with_its_backward_is_differentiable_after_loading():
    # before: "custom_gradient: this graph was loaded without its Python gradient"

    @df.custom_gradient
    def scaled(x):
        y = df.sin(x) * 2.0
        return y, lambda dy: dy * y * 5.0          # deliberately not d y / d x: 10 sin(x) dy

    x = np.array([0.1, 0.2, 0.7])
    f = df.defun(lambda x: df.reduce_sum(scaled(x)))
    _, eager = _gradients(lambda t: df.reduce_sum(scaled(t)), x)
    np.testing.assert_allclose(eager.numpy(), 10.0 * np.sin(x), rtol=1e-12)
    cf = f.get_concrete_function(df.constant(x))
    loaded = df.load_json(json.loads(json.dumps(df.export_json(cf, include_backward=True))))
    for persistent in (False, True):
        np.testing.assert_allclose(_gradients(loaded, x, persistent)[1].numpy(), 10.0 * np.sin(x),
                                   rtol=1e-12)
    _, inside = _gradients(df.defun(lambda t: loaded(t) * 2.0), x)
    np.testing.assert_allclose(inside.numpy(), 20.0 * np.sin(x), rtol=1e-12)
    # a second order needs the backward of the forward's saved `y`: not in the document
    with pytest.raises(df.errors.UnimplementedError, match="custom_gradient: this graph was loaded"):
        nested_gradients(loaded, df.constant(x), combine=df.reduce_sum)
    # without the backward in the document there is no gradient to take: a typed error
    bare = df.load_json(df.export_json(cf))
    with pytest.raises(df.errors.UnimplementedError, match="include_backward=True"):
        _gradients(bare, x)


# ---------------------------------------------------------------------------------------
# A function returning a variable returns its value once loaded

def test_a_loaded_function_returns_the_value_of_a_variable_the_defun_returns():
    # before: the loaded function returned None in its place
    v = df.Variable(np.array([1.0, 2.0]))

    @df.defun
    def step(x):
        v.assign_add(x)
        return x * 2.0, v, {"v": v, "y": x}

    x = np.array([0.5, 0.25])
    cf = step.get_concrete_function(df.constant(x))
    for backward in (False, True):
        v.assign(np.array([1.0, 2.0]))      # exported as its value now
        loaded = df.load_json(json.loads(json.dumps(df.export_json(cf, include_backward=backward))))
        want = step(df.constant(x))
        got = loaded(x)
        np.testing.assert_allclose(got[1].numpy(), [1.5, 2.25])     # the value after the assign
        np.testing.assert_allclose(got[1].numpy(), want[1].numpy())
        np.testing.assert_allclose(got[2]["v"].numpy(), [1.5, 2.25])
        np.testing.assert_allclose(got[0].numpy(), [1.0, 0.5])
        np.testing.assert_allclose(got[2]["y"].numpy(), x)
        np.testing.assert_allclose(loaded(x)[1].numpy(), [2.0, 2.5])   # the loaded copy keeps its state
    only = df.defun(lambda: v).get_concrete_function()
    v.assign(np.array([3.0, 4.0]))
    np.testing.assert_allclose(df.load_json(df.export_json(only))().numpy(), [3.0, 4.0])


def test_an_output_dict_mixing_int_and_str_keys_is_refused_at_load():
    """Export refuses such a dict (its leaves are ordered by sorted key); so does load."""
    import json

    @df.defun
    def f(x):
        return {"a": x, "b": x * 2.0}
    text = json.dumps(df.export_json(f.get_concrete_function(df.constant([1.0]))))
    assert '["b", {"output": 1}]' in text
    df.load_json(json.loads(text.replace('["b", {"output": 1}]', '["c", {"output": 1}]')))
    with pytest.raises(df.errors.GraphFormatError, match=r"keys mix str and int \('a', 1\)"):
        df.load_json(json.loads(text.replace('["b", {"output": 1}]', '[1, {"output": 1}]')))
    with pytest.raises(TypeError, match="keys of one sortable kind"):
        df.export_json(df.defun(lambda x: {"a": x, 1: x}).get_concrete_function(df.constant([1.0])))
