"""Helpers shared by the serialization tests: hand-built graphs, the leaves of a document,
version-1 documents and a loader that runs the graph layer without the decorator layer."""
import copy
import tracemalloc

import numpy as np

import defun as df
from defun.graph.executor import compile_graph
from defun.graph.functions import call_graph
from defun.graph.ir import Graph

F32 = np.float32


# ---------------------------------------------------------------------------------------
# Hand-built graphs

def _leaf():
    """A small library function; named "f" like the inner one, to test unique naming."""
    g = Graph("f")
    with g.building():
        a = g.placeholder((None, 4), df.float32)
        y = df.relu(a) * 0.5
    return g.finalize([y])


def _inner(leaf, v):
    """Calls `leaf` and reads variable `v` (a resource input of this library function)."""
    g = Graph("f")
    with g.building():
        a = g.placeholder((None, 4), df.float32)
        b = g.placeholder((4,), df.float32)
        h = call_graph(leaf, [a])[0]
        y = h + b * df.reduce_sum(v.read_value(), axis=0)
        m = df.reduce_max(y, axis=1)
    return g.finalize([y, m])


def build_rich():
    """(graph, feeds): many op kinds, a multi-output op, consts, a captured eager tensor,
    variables read and assigned, nested calls, a custom gradient and strided slicing."""
    v = df.Variable(np.arange(12, dtype=F32).reshape(3, 4) / 10, name="w")
    u = df.Variable(np.ones(4, F32), name="scale")
    bias = df.constant(np.linspace(-1, 1, 4).astype(F32))   # captured eager tensor

    @df.custom_gradient
    def clip(t):
        return df.identity(t), lambda dy: df.minimum(dy, 1.0)

    leaf = _leaf()
    inner = _inner(leaf, u)
    g = Graph("rich")
    with g.building():
        x = g.placeholder((None, 3), df.float32)
        labels = g.placeholder((None,), df.int32)
        h = df.tanh(df.matmul(x, v.read_value()) + bias)                 # [?, 4]
        h2, m = call_graph(inner, [h, df.constant(np.full(4, 0.25, F32))] + inner.captured_values)
        parts = df.split(h2, 2, axis=1)                                   # multi-output
        joined = df.concat([parts[1], parts[0]], axis=1)
        t = df.transpose(df.reshape(joined, [-1, 2, 2]), [0, 2, 1])
        s = df.reduce_sum(t, axis=(1, 2))
        oh = df.one_hot(labels, 4, on_value=2.0, off_value=-0.5)
        xent = df.softmax_cross_entropy_with_logits(oh, joined)
        sl = clip(h[:, 1:3])
        idx = df.argmax(h, axis=1)
        c = df.cast(idx, df.float32) + df.reduce_mean(sl) + df.where(m > 0.1, m, -m)
        v.assign_add(df.fill([3, 4], np.float32(0.5)))
        r = df.range(0.0, 2.0, 0.5)
        outs = [s, xent, c, r, df.squeeze(df.expand_dims(m, 1), [1])]
    g.finalize(outs)
    feeds = [np.linspace(-1, 1, 15, dtype=F32).reshape(5, 3), np.array([0, 3, 1, 2, 3], np.int32)]
    return g, feeds, [v, u]


def in_memory_run(g, feeds):
    plan = compile_graph(g)
    caps = [c._value for c in g.captured_values]
    return [np.asarray(r) for r in plan(*feeds, *caps)]


def simple_graph():
    v = df.Variable(np.ones((3, 2), F32), name="w")
    g = Graph("simple")
    with g.building():
        x = g.placeholder((None, 3), df.float32)
        y = df.reduce_sum(df.tanh(x @ v) * 2.0, axis=1)
    return g.finalize([y]), v


# ---------------------------------------------------------------------------------------
# The leaves of a document (fuzzing)

def leaves_of(x):
    if isinstance(x, dict):
        return [v for item in x.values() for v in leaves_of(item)]
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in leaves_of(item)]
    return [] if x is None else [x]


# ---------------------------------------------------------------------------------------
# Version 3, version-2 and version-1 documents

def stateful_control_flow_function():
    """A defun whose call, cond and while all run functions that read or assign `v`."""
    v = df.Variable(np.array([1.0, 2.0]), name="v")

    @df.defun
    def scaled(x):
        return x * v

    @df.defun
    def f(x):
        y = scaled(x)
        y = df.cond(df.reduce_sum(y) > 0.0, lambda: y * v, lambda: y - v)
        _, y = df.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y + v), (0, y))
        v.assign_add(df.constant([0.5, 0.5], df.float64))
        return y
    return f, v


def as_version_2(doc):
    """`doc` as a version-2 writer would have written it: no node sites."""
    old = copy.deepcopy(doc)
    old["version"] = 2
    for fdoc in old["functions"]:
        for ndoc in fdoc["nodes"]:
            ndoc.pop("site", None)
    return old


def as_version_1(doc):
    """`doc` as a version-1 writer would have written it: twin ops, no node flag, no sites."""
    old = as_version_2(doc)
    old["version"] = 1
    twins = {"call": "stateful_call", "cond": "stateful_cond", "while": "stateful_while"}
    for fdoc in old["functions"]:
        for ndoc in fdoc["nodes"]:
            if ndoc.pop("stateful", False) and ndoc["op"] in twins:
                ndoc["op"] = twins[ndoc["op"]]
    return old


# The graph layer alone: `defun` stands in as a bare package whose path holds only the
# repository's folders (so defun/__init__.py, which imports the decorator layer, never runs)
# and any module of the decorator layer is refused.
GRAPH_ONLY_LOADER = r"""
import importlib.abc, json, sys, types
import numpy as np
bare = types.ModuleType("defun")
bare.__path__ = [sys.argv[1]]
sys.modules["defun"] = bare

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        parts = name.split(".")
        if parts[0] == "defun" and len(parts) > 1 and parts[1] not in ("runtime", "graph"):
            raise ImportError(f"{name} is blocked: the graph layer must not need it")
        return None

sys.meta_path.insert(0, Blocker())
from defun.graph import serialize
doc = json.load(open(sys.argv[2]))
loaded = serialize.from_document(doc)
out = loaded(np.array([1.0, -3.0]))
print(json.dumps(np.asarray(out.numpy() if hasattr(out, "numpy") else out).tolist()))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("defun.")
                        and m.split(".")[1] not in ("runtime", "graph"))))
"""


def peak_memory(f, *args):
    """(result or the exception raised, peak bytes numpy and Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        try:
            out = f(*args)
        except Exception as e:      # the refusal is the result
            out = e
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
