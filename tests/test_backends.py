"""The backend seam: plans ask a backend per node (or per region of nodes) for the kernel."""
import numpy as np
import pytest

import defun as df
from defun_helpers import assert_close
from defun.graph.backends import Backend, NumpyBackend, Region, backends, get_backend, register_backend
from defun.graph.executor import compile_graph
from defun.graph.functions import plan_of
from graph_helpers import F64, build


class FusingBackend(NumpyBackend):
    """A test backend: runs of unary float ops become one Region (one Python call), the
    rest is numpy. It records the graphs it was asked to compile, to see nested functions
    run on the caller's backend."""

    name = "test_fusing"
    FUSE = {"tanh", "exp", "sin", "cos", "negative", "square"}

    def __init__(self):
        self.graphs = []
        self.regions = 0

    def partition(self, nodes, outputs):
        if nodes:
            self.graphs.append(nodes[0].graph.name)
        used_later = {id(t): k for k, n in enumerate(nodes) for t in n.inputs}   # the last use
        used_later.update((id(t), len(nodes)) for t in outputs)
        steps, run = [], []

        def close():
            if len(run) < 2:
                steps.extend(run)
            else:
                steps.append(self._region(run, used_later, nodes))
            run.clear()
        for n in nodes:
            ok = n.op.name in self.FUSE and n.outputs[0].dtype.is_floating and (
                not run or n.inputs[0] is run[-1].outputs[0])
            if not ok:
                close()
                if n.op.name in self.FUSE and n.outputs[0].dtype.is_floating:
                    run.append(n)
                    continue
                steps.append(n)
            else:
                run.append(n)
        close()
        return steps

    def _region(self, run, used_later, nodes):
        last_pos = nodes.index(run[-1])
        outs = [m.outputs[0] for m in run
                if m is run[-1] or used_later.get(id(m.outputs[0]), -1) > last_pos]
        kernels = [m.op.kernel for m in run]
        keep = [m.outputs[0] in outs for m in run]
        self.regions += 1

        def fused(x):
            got = []
            for k, keep_it in zip(kernels, keep):
                x = k(x)
                if keep_it:
                    got.append(x)
            return tuple(got)
        return Region(run, [run[0].inputs[0]], outs, fused, "fused")


FUSING = FusingBackend()


@pytest.fixture(autouse=True)
def fusing_backend():
    """The test backend is installed only while a test of this module runs."""
    from defun.graph import backends as registry
    registry.register_backend(FUSING)
    yield FUSING
    del registry._BACKENDS[FUSING.name]


OPTIONAL = ("numba",) if "numba" in backends() else ()   # extra [fast], when installed


def test_installed_backends_and_the_default():
    assert backends() == ("numpy",) + OPTIONAL + ("test_fusing",) and df.backends() == backends()
    assert isinstance(get_backend(), NumpyBackend) and get_backend("numpy") is get_backend()


def test_numpy_is_the_one_backend_installed_by_default():
    import subprocess
    import sys
    # numba blocked: the backend of extra [fast] is not installed
    code = "import sys; sys.modules['numba'] = None; import defun as df; print(df.backends())"
    root = __file__.rsplit("/tests/", 1)[0]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         timeout=120)
    assert out.stdout.strip() == "('numpy',)", out.stderr


def test_unknown_backend_is_a_value_error_listing_the_installed_ones():
    with pytest.raises(ValueError,
                       match=r"unknown backend 'gpu'; installed backends: 'numpy', ('numba', )?'test_fusing'"):
        df.defun(lambda x: x, backend="gpu")
    with pytest.raises(ValueError, match="'numpy'"):
        df.defun(backend="gpu")
    g = build("f", [((2,), F64)], df.exp)
    with pytest.raises(ValueError, match="unknown backend"):
        compile_graph(g, backend="gpu")
    assert df.defun(lambda x: x, backend="numpy")(df.constant([1.0])).numpy() == [1.0]


def test_register_backend_refuses_duplicates_and_non_backends():
    with pytest.raises(ValueError, match="already installed"):
        register_backend(NumpyBackend())
    with pytest.raises(TypeError):
        register_backend(object())


def test_plans_are_cached_per_graph_and_backend():
    g = build("f", [((3,), F64)], lambda x: df.sin(df.tanh(df.exp(x))) + 1.0)
    p_numpy, p_fused = plan_of(g), plan_of(g, "test_fusing")
    assert p_numpy is plan_of(g, "numpy") and p_fused is plan_of(g, "test_fusing")
    assert p_numpy is not p_fused
    assert (p_numpy.backend, p_fused.backend) == ("numpy", "test_fusing")
    assert p_fused.source.count("k") < p_numpy.source.count("k")   # one call for the chain
    x = np.array([0.1, -0.4, 2.0])
    assert_close(p_fused(x)[0], np.sin(np.tanh(np.exp(x))) + 1.0, rtol=1e-15)
    assert_close(p_fused(x)[0], p_numpy(x)[0], rtol=0)


def test_a_region_step_keeps_values_used_after_it():
    def f(x):
        a = df.exp(x)
        b = df.tanh(a)
        c = df.sin(b)
        return c * a, b
    g = build("f", [((2,), F64)], f)
    x = np.array([0.3, -1.0])
    got = compile_graph(g, backend="test_fusing")(x)
    want = compile_graph(g)(x)
    for a, b in zip(got, want):
        assert_close(a, b, rtol=0)


def test_defun_runs_on_its_backend_with_gradients_and_nested_functions():
    @df.defun
    def inner(x):
        return df.tanh(df.exp(x))

    def model(x):
        y = inner(x)
        y = df.cond(df.reduce_sum(y) > 0.0, lambda: df.sin(df.cos(y)), lambda: y)
        _, y = df.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, df.square(df.sin(y))), (0, y))
        return df.reduce_sum(y)

    fused = df.defun(model, backend="test_fusing")
    plain = df.defun(model)
    x = df.constant(np.array([0.2, -0.7, 1.1]))
    FUSING.graphs.clear()
    assert_close(fused(x), plain(x), rtol=1e-15)
    names = " ".join(FUSING.graphs)
    # the caller's graph (`inner` is inlined into it), the cond branches and the loop body
    assert "model" in names and "cond_true" in names and "while_body" in names
    with df.GradientTape() as t1:
        t1.watch(x)
        y1 = fused(x)
    with df.GradientTape() as t2:
        t2.watch(x)
        y2 = plain(x)
    assert_close(t1.gradient(y1, x), t2.gradient(y2, x), rtol=1e-13)
    assert FUSING.regions > 0


def test_a_call_node_compiles_its_callee_for_the_callers_backend():
    from defun.graph.functions import call_graph
    h = build("h", [((2,), F64)], lambda x: df.tanh(df.exp(x)))
    g = build("g", [((2,), F64)], lambda x: call_graph(h, [x])[0] * 2.0)
    plan = compile_graph(g, backend="test_fusing")     # not optimized: the call stays
    assert "test_fusing" in h.derived.plans and "numpy" not in h.derived.plans
    x = np.array([0.5, -0.5])
    assert_close(plan(x)[0], np.tanh(np.exp(x)) * 2.0, rtol=1e-15)


def test_regions_cannot_hold_stateful_nodes():
    v = df.Variable(np.zeros(2))

    def f(x):
        v.assign_add(x)
        return x * 1.0
    g = build("f", [((2,), F64)], f)
    node = next(n for n in g.nodes if n.stateful)
    with pytest.raises(ValueError, match="stateful"):
        Region([node], [], [], lambda: (), "bad")
    assert issubclass(FusingBackend, Backend)
