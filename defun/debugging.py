"""`df.debugging`: checks that help find where a computation goes wrong.

    y = df.debugging.check_numerics(df.log(x), "log of the inputs")
    df.debugging.compare(step, x, labels)               # first graph node that differs from eager
    df.debugging.enable_check_numerics()                # the first op making a NaN or Inf raises
    print(df.debugging.side_outputs(train, x, labels))  # what one step saves for its backward

`compare` runs a function eagerly, recording every op with its user source line, then runs
its graph as traced (and, if that agrees, its optimized graph) with every node's value
kept, and pairs nodes with eager ops by (source line, op, occurrence at that line).
`side_outputs` runs one step and lists what each defun call recorded on a tape saved for
the backward.
"""
import collections
import threading

import numpy as np

from defun.runtime import dtypes, numerics, sites
from defun.runtime.context import add_execution_callback, remove_execution_callback, state
from defun.runtime.nest import flatten
from defun.runtime.ops.debug_ops import check_numerics  # noqa: F401
from defun.runtime.tape import OP_TYPE, entry_outputs, is_eager_entry
from defun.runtime.tensor import EagerTensor, Tensor
from defun.graph import passes
from defun.graph.executor import compile_graph
from defun.graph.analysis import live_nodes
from defun.graph.nodes import CONST, PLACEHOLDER
from defun.graph.printer import format_node
from defun.concrete import TRACED_GRAPHS, SideOutput, SideOutputs, side_output_row
from defun.function import Function
from defun.graph_function import GraphFunction

__all__ = ["check_numerics", "compare", "Difference", "side_outputs", "enable_check_numerics",
           "disable_check_numerics"]


# ---------------------------------------------------------------------------------------
# check numerics: every op, eager or in a graph, forward or backward

def enable_check_numerics():
    """From now on every op, eager or in a graph, forward or backward, checks its floating
    outputs: the first NaN or infinity raises df.errors.InvalidArgumentError naming the op,
    whether it ran in the forward or the backward, and your line (for a backward op, the
    line of the forward op whose gradient it computes).

    >>> df.debugging.enable_check_numerics()
    >>> loss(x)     # InvalidArgumentError: check_numerics: log (%3 of loss) produced NaN in the forward at ...

    Graphs then run plans compiled on a checking backend (compiled once per graph, the
    first time); `disable_check_numerics()` goes back to the plans that check nothing,
    which pay nothing for the switch.
    """
    numerics.enable()


def disable_check_numerics():
    """Stop checking (see enable_check_numerics)."""
    numerics.disable()


# ---------------------------------------------------------------------------------------
# compare: eager against graph, node by node

class Difference(collections.namedtuple(
        "Difference", "node op line source output graph_shape eager_shape max_abs max_rel "
                      "eager_only optimized", defaults=(False,))):
    """The first graph node whose value differs from the eager op paired with it.

    node: the node as the graph listing prints it; op; line (`file:line`) and source (its
    text); output: which output of the node; graph_shape / eager_shape; max_abs / max_rel:
    the largest absolute and relative difference (inf when the shapes differ or only one
    is NaN); eager_only: ops the eager run executed at that line that the compared graph
    does not have there (a pass removed or rewrote them); optimized: False when the graph
    as traced differs there, True when only the optimized graph does (a pass changed it).
    """

    __slots__ = ()

    def __str__(self):
        where = f"{self.node} at {self.line}{f' ({self.source})' if self.source else ''}"
        if self.graph_shape != self.eager_shape:
            what = f"the graph's value has shape {self.graph_shape}, eager {self.eager_shape}"
        else:
            what = (f"the graph's value differs from eager by up to {self.max_abs:.6g} "
                    f"(relative {self.max_rel:.3g})")
        out = f" output {self.output}" if self.output else ""
        graph = "optimized graph" if self.optimized else "graph"
        only = ""
        if self.eager_only:
            only = (f"; eagerly this line also ran {', '.join(self.eager_only)}, which the "
                    f"{graph} does not have there")
        if self.optimized:
            only += " (the graph as traced agrees: an optimization pass changed this value)"
        return f"{where}{out}: {what}{only}"


def compare(f, *args, rtol=1e-5, atol=1e-6, **kwargs):
    """Run `f(*args, **kwargs)` eagerly and as a graph; return the Difference of the first
    node (in program order) whose value differs beyond `atol + rtol * |eager|`, or None when
    every node agrees.

    >>> df.debugging.compare(loss, x, labels)    # None, or the first node that disagrees

    `f` is a defun (or a plain function, traced for the comparison). The graph as traced
    runs first, so a difference is named at the node you wrote; only when it agrees
    everywhere does the optimized graph run, to find a node a pass changed
    (`Difference.optimized`). Variables start every run from the same values and end as
    after one call. Nodes are paired with eager ops by (user source line, op, occurrence at
    that line); nodes with no partner (nodes a pass rewrote) are not compared themselves,
    but what they feed is.
    """
    if state.graph is not None:
        raise RuntimeError("df.debugging.compare runs a function eagerly; call it outside traced code")
    fn = f if isinstance(f, Function) else Function(f)
    concrete = fn.get_concrete_function(*args, **kwargs)
    _, tensors = fn._key_and_tensors(args, kwargs)
    inputs = [*tensors, *concrete.graph.captured_values]
    stores = [t._value for t in inputs if t.dtype is dtypes.resource]
    start = [(s, np.array(s.value, copy=True)) for s in stores]

    def restore():      # every graph run starts from the variable values the eager run had
        for store, value in start:
            store.value = np.array(value, copy=True)
    try:
        eager_ops, eager_result = _run_recording(fn.python_function, args, kwargs)
    finally:
        restore()
    eager = collections.defaultdict(list)
    for op_name, site, outs in eager_ops:
        eager[(site, op_name)].append(outs)
    # a node's occurrence at its (line, op) counts in the traced graph, whose ids the
    # optimized copy keeps, so nodes a pass dropped do not shift their neighbours' pairing
    occurrence, counts = {}, collections.Counter()
    for n in concrete.graph.nodes:
        if n.op is not PLACEHOLDER and n.op is not CONST:
            key = (n.site, _op_key(n))
            occurrence[n.id] = counts[key]
            counts[key] += 1
    traced = concrete.graph
    d = _first_difference(traced, concrete, inputs, eager, occurrence, eager_result, rtol, atol)
    optimized = passes.optimize(traced)
    if d is not None or optimized is traced:
        return d
    restore()
    d = _first_difference(optimized, concrete, inputs, eager, occurrence, eager_result, rtol, atol)
    return d._replace(optimized=True) if d is not None else None


def _first_difference(graph, concrete, inputs, eager, occurrence, eager_result, rtol, atol):
    """Run `graph` (concrete's traced graph or an optimized copy) keeping every node's value;
    the Difference of its first node that disagrees with its eager partner, or of an output."""
    nodes = [n for n in live_nodes(graph) if n.op is not PLACEHOLDER and n.op is not CONST]
    kept = [t for n in nodes for t in n.outputs if t.dtype is not dtypes.resource]
    plan = compile_graph(graph, outputs=list(graph.outputs) + kept, backend=concrete._fn.backend)
    results = plan.run(*[t._value for t in inputs])
    n_out = len(graph.outputs)
    values = {id(t): v for t, v in zip(kept, results[n_out:])}
    pairs, paired = [], set()
    for n in nodes:
        key, k = (n.site, _op_key(n)), occurrence.get(n.id)
        if k is not None and k < len(eager.get(key, ())):
            pairs.append((n, eager[key][k]))
            paired.add((key, k))

    def eager_only(site):
        return sorted({op for (s, op), outs in eager.items() if s == site
                       for k in range(len(outs)) if ((s, op), k) not in paired})

    for n, outs in pairs:
        for j, (t, e) in enumerate(zip(n.outputs, outs)):
            if id(t) in values and e is not None:
                d = _difference(values[id(t)], e, rtol, atol)
                if d is not None:
                    return _report(n, j, values[id(t)], e, d, eager_only(n.site))
    # every paired node agrees: the outputs may still differ (an unpaired node made them)
    for k, leaf in zip(concrete._out_index, flatten(eager_result)):
        if type(k) is int and isinstance(leaf, (Tensor, np.ndarray, float, int)):
            e = np.asarray(leaf._value if isinstance(leaf, EagerTensor) else leaf)
            d = _difference(results[k], e, rtol, atol)
            if d is not None:
                t = graph.outputs[k]
                return _report(t.node, t.index, results[k], e, d, eager_only(t.node.site))
    return None


def _op_key(node):
    """What an eager run calls a node's op: a call of a defun is one op named by its graph."""
    f = node.attrs.get("f") if node.op.name == "call" else None
    return f.name if f is not None else node.op.name


def _run_recording(python_function, args, kwargs):
    """Run eagerly; returns ([(op name, user site, output arrays)], result) of this thread."""
    ops = []
    me = threading.get_ident()

    def record(op_name, name, attrs, inputs, outputs):
        if threading.get_ident() == me and state.graph is None:
            ops.append((op_name, sites.user_site(),
                        [o._value if isinstance(getattr(o, "_value", None), np.ndarray) else None
                         for o in outputs]))

    add_execution_callback(record)
    try:
        result = python_function(*args, **kwargs)
    finally:
        remove_execution_callback(record)
    return ops, result


def _difference(got, want, rtol, atol):
    """(max abs, max relative) difference when beyond the tolerance, else None."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return np.inf, np.inf
    wide = np.complex128 if "c" in (got.dtype.kind, want.dtype.kind) else np.float64
    g, w = got.astype(wide).reshape(-1), want.astype(wide).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g - w)
        diff[(g == w) | (np.isnan(g) & np.isnan(w))] = 0.0     # equal infinities, NaN and NaN
        diff[np.isnan(diff)] = np.inf                          # NaN against a number
        scale = np.abs(w)
        if not (diff > atol + rtol * scale).any():
            return None
        rel = diff / np.maximum(scale, np.finfo(np.float64).tiny)
    return float(diff.max()), float(rel.max())


def _report(node, output, got, want, d, eager_only):
    return Difference(format_node(node), node.op.name,
                      sites.format_site(node.site) if node.site else "<unknown location>",
                      sites.source_line(node.site), output, tuple(np.shape(got)),
                      tuple(np.shape(want)), d[0], d[1], tuple(eager_only))


# ---------------------------------------------------------------------------------------
# side_outputs of a whole step

def side_outputs(step, *args, **kwargs):
    """Run `step(*args, **kwargs)` once and return what every defun call recorded on a
    tape during it saved for the backward: SideOutputs rows (function, name, producer,
    line, shape, dtype, bytes) with the actual sizes; `print` shows a table with the total.

    >>> print(df.debugging.side_outputs(train_step, x, labels))

    The step really runs (variables are updated as by any step). A step that is itself one
    defun computes its gradient inside its graph and saves nothing between calls.
    """
    rows, calls = [], [0]
    me = threading.get_ident()

    def record(op_name, name, attrs, inputs, outputs):
        if threading.get_ident() != me or state.graph is not None:
            return
        saved = _saved_by_recorded_call(op_name, outputs)
        if saved is None:
            return
        calls[0] += 1
        graph = _traced_graph(op_name)
        side = GraphFunction.of(graph).backward().side_outputs if graph is not None else ()
        if len(side) == len(saved):
            rows.extend(side_output_row(t, op_name, v) for t, v in zip(side, saved))
        elif side:      # kept by the call some other way than on its tape entry: static sizes
            rows.extend(side_output_row(t, op_name) for t in side)
        else:           # not a trace of this process: the tape entry's sizes only
            rows.extend(_unnamed_row(op_name, k, v) for k, v in enumerate(saved))

    add_execution_callback(record)
    try:
        step(*args, **kwargs)
    finally:
        remove_execution_callback(record)
    return SideOutputs(rows, calls=calls[0])


def _saved_by_recorded_call(op_name, outputs):
    """The arrays a defun call just recorded on a tape keeps besides its outputs (its side
    outputs: the tape entry's outputs after the real ones), or None if no tape recorded it."""
    outputs = tuple(outputs)
    for tape in state.tapes:
        if tape.entries:
            entry = tape.entries[-1]
            if is_eager_entry(entry):    # an eager op's entry: not a call
                continue
            recorded = entry_outputs(entry)
            if entry[OP_TYPE] == op_name and len(recorded) >= len(outputs) and \
                    all(a is b for a, b in zip(recorded, outputs)):
                return [t._value for t in recorded[len(outputs):]]
    return None


def _traced_graph(name):
    """The graph of a trace (or of the backward of one, `<name>_grad`) called `name`."""
    graph = TRACED_GRAPHS.get(name)
    if graph is None and name.endswith("_grad"):
        forward = _traced_graph(name[:-len("_grad")])
        built = forward.derived.backward if forward is not None else None
        if built is not None and built[0].graph.name == name:
            graph = built[0].graph
    return graph


def _unnamed_row(function, k, value):
    value = np.asarray(value)
    return SideOutput(f"side output {k}", "", "", value.shape, value.dtype.name, int(value.nbytes),
                      function, "")
