"""Helpers shared by the graph-level tests: building graphs, and running and comparing a pass's
input and output graphs (the passes tests)."""
import textwrap

import numpy as np

import defun as df
from defun.graph import passes
from defun.graph.executor import compile_graph
from defun.graph.ir import Graph
from defun.graph.verify import verify

F32, F64, I32 = df.float32, df.float64, df.int32

ALL_PASSES = [passes.eliminate_dead_code, passes.eliminate_common_subexpressions,
              passes.fold_constants, passes.simplify_algebra, passes.inline_calls, passes.optimize]


def build(name, types, fn):
    """A finalized graph `name` with placeholders of `types` [(shape, dtype)], outputs fn(*args)."""
    g = Graph(name)
    with g.building():
        args = [g.placeholder(s, d) for s, d in types]
        out = fn(*args)
    return g.finalize(list(out) if isinstance(out, (list, tuple)) else [out])


def golden(text):
    return textwrap.dedent(text).strip()


# passes: random inputs, results and conventions compared before/after
def random_args(g, rng, size=3):
    """Random arrays for g's argument placeholders (unknown sizes become `size`)."""
    out = []
    for t in g.inputs:
        shape = tuple(size if d is None else d for d in t.shape)
        if t.dtype.is_floating:
            out.append(rng.standard_normal(shape).astype(t.dtype.np))
        elif t.dtype.is_integer:
            out.append(rng.integers(-5, 6, shape).astype(t.dtype.np))
        else:
            out.append(rng.random(shape) > 0.5)
    return out


def feed(g, args):
    """args followed by the raw values of g's captures (resource handles -> their stores)."""
    return list(args) + [getattr(v, "_value", v) for v in g.captured_values]


def run(g, args):
    return compile_graph(g)(*feed(g, args))


def assert_same_results(before, after, args):
    want, got = run(before, args), run(after, args)
    assert len(want) == len(got)
    for w, a in zip(want, got):
        assert np.asarray(a).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(a, w)


def assert_same_convention(before, after):
    assert after is not before
    assert len(after.all_inputs) == len(before.all_inputs)
    for a, b in zip(after.all_inputs, before.all_inputs):
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
        assert a.node.graph is after
    assert after.capture_order == before.capture_order
    assert after.captured_values == before.captured_values
    assert [(t.shape, t.dtype) for t in after.outputs] == [(t.shape, t.dtype) for t in before.outputs]


def check_pass(pass_fn, g, expected, seeds=(0, 1, 2)):
    """Run pass_fn on g: golden text, convention kept, g untouched, results equal."""
    text_before, nodes_before = str(g), list(g.nodes)
    h = pass_fn(g)
    assert str(g) == text_before and g.nodes == nodes_before, "a pass mutated its input"
    verify(h)
    assert_same_convention(g, h)
    assert str(h) == textwrap.dedent(expected).strip()
    for seed in seeds:
        assert_same_results(g, h, random_args(g, np.random.default_rng(seed)))
    return h


def op_names(g):
    return [n.op.name for n in g.nodes if n.op.name != "placeholder"]


def bump_function(v, shape=(2,)):
    h = Graph("bump")
    with h.building():
        x = h.placeholder(shape, F32)
        v.assign_add(x)
        y = x + 1.0
    return h.finalize([y])
