"""Loaded documents within budgets: memory (max_bytes), loop iterations (max_iterations), and
attrs the kernels accept. A hostile document is refused before anything large is allocated."""
import json

import numpy as np
import pytest

import defun as df
from defun.graph.functions import plan_of
from defun.graph.serialize import budget
from defun.runtime import registry

F32, F64 = np.float32, np.float64
MB = 1 << 20


def export(f, *args):
    return json.loads(json.dumps(df.export_json(df.defun(f).get_concrete_function(*args))))


def entry_nodes(doc, op):
    return [n for n in doc["functions"][0]["nodes"] if n["op"] == op]


def test_the_defaults_are_finite_and_arguments_are_checked():
    assert budget.DEFAULT_MAX_BYTES == 1 << 30 and budget.DEFAULT_MAX_ITERATIONS == 100_000
    doc = export(lambda x: x * 2.0, df.constant([1.0]))
    f = df.load_json(doc)
    assert (f.backend.max_bytes, f.backend.max_iterations) == (1 << 30, 100_000)
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="max_bytes must be an int >= 0"):
            df.load_json(doc, max_bytes=bad)
        with pytest.raises(ValueError, match="max_iterations must be an int >= 0"):
            df.load_json(doc, max_iterations=bad)
    assert df.load_json(doc, max_bytes=None, max_iterations=None)(np.ones(1, F32)).numpy() == [2.0]


def test_a_static_value_past_the_budget_is_refused_before_it_is_allocated():
    """zeros of 2**28 float64 (2 GiB) is within every limit of the format; the default
    budget refuses it before numpy allocates anything."""
    doc = export(lambda x: df.zeros([4], df.float64) + x, df.constant(np.ones(1)))
    for n in doc["functions"][0]["nodes"]:
        if n["op"] in ("zeros", "add"):
            n["outputs"][0]["shape"] = [2 ** 28]
    entry_nodes(doc, "zeros")[0]["attrs"]["shape"] = [2 ** 28]
    doc["functions"][0]["outputs"][0]["shape"] = [2 ** 28]
    f = df.load_json(doc)
    with pytest.raises(df.errors.ResourceExhaustedError) as info:
        f(np.ones(1))
    msg = str(info.value)
    assert "zeros" in msg and f"{2 ** 31} bytes" in msg and "budget of 1073741824 bytes" in msg
    assert "max_bytes=" in msg


def test_a_value_sized_at_run_time_is_refused_before_it_is_allocated():
    """tile by 2**28 of an input of unknown size: the size is known only when the call has
    its input, and is checked then, before the kernel runs."""
    doc = json.loads(json.dumps(df.export_json(df.defun(
        lambda x: df.tile(x, [2]), input_signature=[df.TensorSpec([None], df.float32)]).get_concrete_function())))
    entry_nodes(doc, "tile")[0]["attrs"]["multiples"] = [2 ** 28]
    f = df.load_json(doc)
    np.testing.assert_array_equal(df.load_json(doc, max_bytes=64)(np.ones(0, F32)).numpy(), [])
    with pytest.raises(df.errors.ResourceExhaustedError, match=f"tile: its result needs {2 ** 32} bytes"):
        f(np.ones(4, F32))
    small = df.load_json(doc, max_bytes=4 * 2 ** 28)
    assert small(np.ones(1, F32)).shape == (2 ** 28,)      # exactly the budget: allowed


def test_a_value_whose_size_depends_on_data_is_refused_before_it_is_allocated():
    doc = export(lambda d, ids: df.segment_sum(d, ids), df.constant(np.ones((3, 1024), F32)),
                 df.constant(np.array([0, 0, 1], np.int32)))
    f = df.load_json(doc, max_bytes=64 * MB)
    np.testing.assert_array_equal(f(np.ones((3, 1024), F32), np.array([0, 1, 1], np.int32)).numpy()[:, 0],
                                  [1.0, 2.0])
    with pytest.raises(df.errors.ResourceExhaustedError, match="segment_sum"):
        f(np.ones((3, 1024), F32), np.array([0, 1, 2 ** 30], np.int32))   # 4 TiB of rows


def test_values_that_die_are_released_and_values_held_together_add_up():
    """A chain of 8 MB values passes a 24 MB budget (two are alive at a time); stacking four
    of them needs 32 MB more while they are alive."""
    n = 2 * MB
    x = df.constant(np.ones(n, F32))

    def chain(v):
        for _ in range(20):
            v = df.tanh(v) * 0.5
        return df.reduce_sum(v)
    f = df.load_json(export(chain, x), max_bytes=3 * 4 * n)
    assert np.isfinite(f(np.ones(n, F32)).numpy())
    g = df.load_json(export(lambda v: df.stack([v * 1.0, v * 2.0, v * 3.0, v * 4.0]), x), max_bytes=6 * 4 * n)
    with pytest.raises(df.errors.ResourceExhaustedError, match="stack"):
        g(np.ones(n, F32))
    assert df.load_json(export(lambda v: df.stack([v * 1.0, v * 2.0, v * 3.0, v * 4.0]), x),
                        max_bytes=8 * 4 * n)(np.ones(n, F32)).shape == (4, n)


def test_a_failed_budget_check_leaves_the_documents_variables_unchanged():
    v = df.Variable(np.zeros(4, F32), name="v")

    def step(x):
        v.assign_add(x)
        return df.tile(x, [1024])
    f = df.load_json(export(step, df.constant(np.ones(4, F32))), max_bytes=1024)
    with pytest.raises(df.errors.ResourceExhaustedError):
        f(np.ones(4, F32))
    np.testing.assert_array_equal(f.variables["v"], np.zeros(4, F32))


def _endless_loop_doc(dtype=np.float32, size=3):
    """A while loop exported with maximum_iterations=null whose condition is always true."""
    @df.defun
    def loop(x):
        return df.while_loop(lambda i, y: i >= 0, lambda i, y: (i + 1, y * 1.0), (0, x))[1]
    return export(lambda x: loop(x), df.constant(np.ones(size, dtype)))


def test_a_loaded_while_loop_stops_after_max_iterations():
    doc = _endless_loop_doc()
    whiles = [n for fd in doc["functions"] for n in fd["nodes"] if n["op"] == "while"]
    assert whiles and all(n["attrs"].get("maximum_iterations") is None for n in whiles)
    f = df.load_json(doc, max_iterations=500)
    with pytest.raises(df.errors.ResourceExhaustedError, match="500 iterations and the condition still holds"):
        f(np.ones(3, F32))
    with pytest.raises(df.errors.ResourceExhaustedError, match="max_iterations=100000"):
        df.load_json(doc)(np.ones(3, F32))       # the default is finite


def test_a_loop_within_its_iterations_gives_the_loop_result():
    @df.defun
    def loop(x):
        return df.while_loop(lambda i, y: i < 7, lambda i, y: (i + 1, y * 2.0), (0, x))[1]
    doc = export(lambda x: loop(x), df.constant(np.ones(2, F32)))
    np.testing.assert_array_equal(df.load_json(doc, max_iterations=7)(np.ones(2, F32)).numpy(), [128.0, 128.0])
    with pytest.raises(df.errors.ResourceExhaustedError):
        df.load_json(doc, max_iterations=6)(np.ones(2, F32))


def test_a_loops_values_and_kept_history_count_per_iteration():
    """A loop over a 1 MB value passes a 4 MB budget for many iterations (one iteration's
    values are alive at a time); one keeping its history for a gradient runs out."""
    n = MB // 4

    def loop(x):
        # y * cos(0 y) is y, and its gradient needs y and cos(0 y) from every iteration
        return df.while_loop(lambda i, y: i < 40, lambda i, y: (i + 1, y * df.cos(y * 0.0)), (0, x))[1]
    x = df.constant(np.ones(n, F32))
    doc = export(loop, x)
    np.testing.assert_array_equal(df.load_json(doc, max_bytes=4 * MB)(np.ones(n, F32)).numpy()[:2], [1.0, 1.0])
    with_history = json.loads(json.dumps(df.export_json(df.defun(loop).get_concrete_function(x),
                                                        include_backward=True)))
    f = df.load_json(with_history, max_bytes=4 * MB)
    f(np.ones(n, F32))                      # a plain call keeps no history
    with df.GradientTape() as tape:         # the forward for a gradient keeps it: 120 MB
        t = df.constant(np.ones(n, F32))
        tape.watch(t)
        with pytest.raises(df.errors.ResourceExhaustedError, match="while"):
            f(t)
    with df.GradientTape() as tape:     # 3 MB kept per iteration, and their stacks: 240 MB
        tape.watch(t)
        y = df.load_json(with_history, max_bytes=300 * MB)(t)
    np.testing.assert_array_equal(tape.gradient(y, t).numpy()[:2], [1.0, 1.0])


# ---------------------------------------------------------------------------------------
# Attrs: the loader checks every attr against what its kernel accepts

@pytest.mark.parametrize("mode", ["EMPTY", "WRAP", "EDGE", "MEAN", "constant", ""])
def test_pad_modes_outside_the_format_are_refused(mode):
    doc = export(lambda x: df.pad(x, [[1, 1]], mode="REFLECT"), df.constant([1.0, 2.0, 3.0]))
    entry_nodes(doc, "pad")[0]["attrs"]["mode"] = mode
    with pytest.raises(df.errors.GraphFormatError) as info:
        df.load_json(doc)
    assert "attrs.mode: expected one of 'CONSTANT', 'REFLECT', 'SYMMETRIC'" in str(info.value)


def test_enumerated_attrs_are_declared_once_in_the_attr_type_table():
    from defun.runtime import attr_types
    enumerated = {(op.name, a): attr_types.choices(t) for op in registry.all_ops()
                  for a, t in op.attrs.items() if attr_types.choices(t)}
    assert enumerated[("pad", "mode")] == ("CONSTANT", "REFLECT", "SYMMETRIC")
    assert enumerated[("conv2d", "padding")] == ("SAME", "VALID")
    assert enumerated[("max_pool2d", "padding")] == ("SAME", "VALID")
    assert enumerated[("sort", "direction")] == ("ASCENDING", "DESCENDING")
    assert enumerated[("print", "output_stream")] == ("stdout", "stderr")
    assert enumerated[("meshgrid", "indexing")] == ("xy", "ij")
    # a traced graph is held to the same list (graph.verify asks the same table)
    assert not attr_types.check(registry.get("pad").attrs["mode"], "WRAP")


def test_a_kernel_that_disagrees_with_its_shape_inference_is_stopped_at_the_node():
    """one_hot's inference and kernel read a negative axis differently: the document's
    declared type and the kernel's result disagree, and the node says so."""
    doc = export(lambda i: df.one_hot(i, 2), df.constant(np.array([0, 1, 1], np.int32)))
    node = entry_nodes(doc, "one_hot")[0]
    node["attrs"]["axis"] = -2
    try:
        f = df.load_json(doc)
    except df.errors.GraphFormatError:
        return      # refused at load: also fine
    with pytest.raises(df.errors.InvalidArgumentError, match="one_hot computed .* where the document declares"):
        f(np.array([0, 1, 1], np.int32))


def test_plans_of_ordinary_defuns_pay_nothing():
    """A defun's plan calls the registered kernels themselves; only loaded plans wrap them."""
    f = df.defun(lambda x: df.tanh(x) * 2.0)
    cf = f.get_concrete_function(df.constant([1.0, 2.0]))
    plan = plan_of(cf.graph)
    kernels = [v for k, v in plan.run.__globals__.items() if k.startswith("k")]
    assert plan.backend == "numpy" and registry.get("tanh").kernel in kernels
    loaded = df.load_json(df.export_json(cf))
    assert loaded._plan.backend == "loaded"
    assert registry.get("tanh").kernel not in [v for k, v in loaded._plan.run.__globals__.items()
                                               if k.startswith("k")]


def test_no_budgets_run_numpys_kernels_unwrapped():
    """max_bytes, max_iterations and max_operations None: nothing to count, so the plain
    numpy backend runs the document (the same results, no meter)."""
    x = df.constant(np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3))
    doc = export(lambda a: df.reduce_sum(df.tanh(a) * 2.0, axis=1), x)
    free = df.load_json(doc, max_bytes=None, max_iterations=None, max_operations=None)
    metered = df.load_json(doc)
    assert free.backend.name == "numpy" and type(metered.backend).__name__ == "BudgetBackend"
    np.testing.assert_array_equal(free(x.numpy()).numpy(), metered(x.numpy()).numpy())
