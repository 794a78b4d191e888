"""The executor: compile a function graph once into straight-line Python over numpy.

`compile_graph(graph)` decides the order at compile time (creation order is topological
and keeps stateful ops in program order), binds every kernel and attr, drops each value
after its last use, and generates one Python function whose body is one line per node.
Names in the generated source are made here (a0, v3, k3), never taken from a graph or file.
Per call the cost is the kernels plus one Python call per node.

A failed call leaves variables unchanged: a plan that may assign (itself or in a function
it runs) logs each variable's old value before assigning, in a per-thread undo log shared
with the plans it calls, and undoes the log when any node fails.
"""
import sys
import threading

import numpy as np

from runtime import errors
from graph.printer import format_node
from runtime import sites
from runtime.execute import describe_value
from runtime.ops.resource_ops import ASSIGN_OPS
from graph.ir import CONST, PLACEHOLDER
from graph.verify import reaches

__all__ = ["compile_graph", "Plan", "live_nodes", "assigns_variables"]


def live_node_ids(graph, outputs=None):
    """ids of the nodes `outputs` (default: the graph's) or an effect depends on.

    Effects are stateful ops and ops running a function that contains one (a call of a
    function that assigns a variable runs even when its outputs are unused).
    """
    outputs = graph.outputs if outputs is None else outputs
    live = {id(t.node) for t in outputs}
    add = live.add
    # one sweep from the last node back: creation order is topological, so every user of
    # a node is seen before it (a third faster than a depth-first walk from the outputs)
    for n in reversed(graph.nodes):
        if id(n) in live or n.stateful:
            add(id(n))
            for t in n.inputs:
                add(id(t.node))
            for c in n.control_inputs:
                add(id(c))
    return live


def live_nodes(graph, outputs=None):
    """The nodes of `live_node_ids`, in program order."""
    live = live_node_ids(graph, outputs)
    return [n for n in graph.nodes if id(n) in live]


class Plan:
    """A compiled function: `plan(*arrays) -> tuple of arrays`."""

    __slots__ = ("run", "source", "graph", "num_inputs", "num_outputs", "_lines")

    def __call__(self, *args):
        return self.run(*args)


def _default_bind(op, attrs):
    kernel = op.kernel
    if op.bind is not None:
        return op.bind(attrs), False
    return kernel, bool(attrs)


def _assigns(op):
    return op.name in ASSIGN_OPS


def assigns_variables(node, memo=None):
    """True if `node` assigns a variable, or runs a function that does (calls, branches)."""
    return reaches(node, _assigns, memo)


# The undo log of the running call, per thread: a list of (variable store, old value), or
# None. The outermost plan that may assign (itself or through a plan it calls) starts it;
# nested plans append to it, so when any later node fails, every assignment the call made,
# however deeply nested, is undone. Plans that never assign do not touch it (no per-call cost).
class _UndoLog(threading.local):
    log = None      # the class default: every thread starts without a log


_undo = _UndoLog()


def compile_graph(graph, outputs=None, name=None):
    """Compile `graph` (its all_inputs -> `outputs`, default graph.outputs) into a Plan."""
    outputs = list(graph.outputs if outputs is None else outputs)
    inputs = graph.all_inputs
    nodes = live_nodes(graph, outputs)
    ns = {"_fail": _fail, "_rollback": _rollback, "_undo": _undo}
    var_of = {}
    for i, t in enumerate(inputs):
        var_of[id(t)] = f"a{i}"
    input_nodes = {id(t.node) for t in inputs}

    # last use of each value (by position in `nodes`), to free buffers early
    last_use = {}
    for pos, n in enumerate(nodes):
        for t in n.inputs:
            last_use[id(t)] = pos
    for t in outputs:               # outputs are never freed
        last_use[id(t)] = -1

    # Buffer reuse: a ufunc result that only ufuncs read (so no view of it exists) may be
    # overwritten by the ufunc that reads it last (`out=`), saving an allocation per node.
    ufunc_only = _ufunc_only_consumers(nodes)
    reusable = set()    # id(tensor): fresh arrays of this plan that nothing else aliases
    lines = []
    line_node = {}
    memo = {}
    has_assign = any(assigns_variables(n, memo) for n in nodes)
    # Nodes binding the same function share one global name (all tanh nodes call `k1`):
    # fewer distinct names make compile() of a 10,000-node plan ~10% faster.
    kernel_names = {}
    body_indent = "        "
    for pos, n in enumerate(nodes):
        if id(n) in input_nodes:
            continue
        op = n.op
        if op is PLACEHOLDER:
            raise errors.InvalidArgumentError(
                f"function {graph.name!r}: placeholder {n.name} is not one of its inputs")
        if op is CONST:
            cname = f"c{n.id}"
            ns[cname] = n.attrs["value"]
            var_of[id(n.outputs[0])] = cname
            continue
        fn, pass_attrs = _default_bind(op, n.attrs)
        kname = kernel_names.get(id(fn))
        if kname is None:
            kname = kernel_names[id(fn)] = f"k{n.id}"
            ns[kname] = fn
        args = [var_of[id(t)] for t in n.inputs]
        if pass_attrs:
            for j, (k, v) in enumerate(sorted(n.attrs.items())):
                an = f"t{n.id}_{j}"
                ns[an] = v
                args.append(f"{k}={an}")
        outs = n.outputs
        if type(fn) is np.ufunc and fn.nout == 1 and outs and not pass_attrs:
            target = _reusable_input(n, pos, reusable, last_use)
            if target is not None:   # write the result over a dead temporary: no allocation
                args.append(f"out={var_of[id(target)]}")
            if _fresh_result(outs[0]) and id(outs[0]) in ufunc_only:
                reusable.add(id(outs[0]))
        call = f"{kname}({', '.join(args)})"
        if op.name in ASSIGN_OPS:
            h = var_of[id(n.inputs[0])]
            lines.append(f"{body_indent}_u.append(({h}, {h}.value))")
            line_node[len(lines)] = n     # a bad handle fails here: name the assign node
        if not outs:
            stmt = call
        elif len(outs) == 1 and op.single:
            v = f"v{n.id}"
            var_of[id(outs[0])] = v
            stmt = f"{v} = {call}"
        else:
            names = [f"v{n.id}_{k}" for k in range(len(outs))]
            for t, v in zip(outs, names):
                var_of[id(t)] = v
            stmt = f"{', '.join(names)}{',' if len(names) == 1 else ''} = {call}"
        lines.append(body_indent + stmt)
        line_node[len(lines)] = n
        # free inputs whose last use is this node (values of nodes, not inputs or constants)
        dead = None
        for t in n.inputs:
            if last_use[id(t)] == pos:
                v = var_of[id(t)]
                if v[0] == "v":
                    dead = [v] if dead is None else dead + [v]
        if dead is not None:
            lines.append(f"{body_indent}del {', '.join(sorted(set(dead)))}")
    for t in outputs:
        if id(t) not in var_of:
            raise errors.InvalidArgumentError(
                f"function {graph.name!r}: output {t.name} is not computed by the function")
    ret = ", ".join(var_of[id(t)] for t in outputs)
    fname = "plan"
    params = ", ".join(f"a{i}" for i in range(len(inputs)))
    head = [f"def {fname}({params}):"]
    if has_assign:
        # _o: the caller's undo log (None: this call owns a new one); _m: where ours starts
        head += ["    _o = _undo.log",
                 "    _u = _undo.log = [] if _o is None else _o",
                 "    _m = len(_u)"]
    head.append("    try:")
    offset = len(head)
    tail = [f"{body_indent}return ({ret}{',' if len(outputs) == 1 else ''})",
            "    except Exception as _e:"]
    if has_assign:
        tail.append("        _rollback(_u, _m)")
    tail.append("        _fail(_e)")
    if has_assign:
        tail += ["    finally:", "        _undo.log = _o"]
    src_lines = head + lines + tail
    source = "\n".join(src_lines) + "\n"
    code = compile(source, f"<defun plan {graph.name}>", "exec")
    exec(code, ns)
    run = ns[fname]
    lineno_node = {offset + k: n for k, n in line_node.items()}
    ns["_lines"] = lineno_node
    ns["_var_names"] = var_of     # id(tensor) -> its name in the plan, for error messages
    ns["_code"] = run.__code__
    plan = Plan()
    plan.run = run
    plan.source = source
    plan.graph = graph
    plan.num_inputs = len(inputs)
    plan.num_outputs = len(outputs)
    plan._lines = lineno_node
    return plan


def _fresh_result(t):
    """A ufunc result that is surely an array of its own: static, fully known, rank >= 1."""
    return t.shape and None not in t.shape


def _ufunc_only_consumers(nodes):
    """id(tensor) of values every consumer of which is a plain ufunc node (no views taken)."""
    ok, bad = set(), set()
    for n in nodes:
        plain = type(n.op.kernel) is np.ufunc and n.op.bind is None and not n.attrs
        for t in n.inputs:
            (ok if plain else bad).add(id(t))
    return ok - bad


def _reusable_input(node, pos, reusable, last_use):
    out = node.outputs[0]
    if not _fresh_result(out):
        return None
    seen = set()
    for t in node.inputs:
        if id(t) in seen:
            return None     # the same value twice: leave it alone
        seen.add(id(t))
    for t in node.inputs:
        if id(t) in reusable and last_use.get(id(t)) == pos and t.shape == out.shape \
                and t.dtype is out.dtype:
            reusable.discard(id(t))
            return t
    return None


def _rollback(undo, start=0):
    """Undo the assignments logged from `start` on, newest first, and drop them from the log
    (an enclosing call that goes on after catching the failure must not undo them twice)."""
    for h, old in reversed(undo[start:]):
        h.value = old
    del undo[start:]


def _fail(exc):
    """Re-raise a kernel failure naming the node that was executing."""
    tb = exc.__traceback__
    frame_globals = sys._getframe(1).f_globals
    code = frame_globals["_code"]
    node = frame = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            node = frame_globals["_lines"].get(tb.tb_lineno)
            frame = tb.tb_frame
        tb = tb.tb_next
    if node is None:
        raise exc
    where = f" (traced at {sites.format_site(node.site)})" if node.site else ""
    # the values the node got: its input variables are still alive on the failing line
    names = frame_globals["_var_names"]
    scope = {**frame_globals, **frame.f_locals}
    got = [scope.get(names.get(id(t))) for t in node.inputs]
    given = ""
    if got and all(v is not None for v in got):
        given = " on " + ", ".join(describe_value(v) for v in got)
    msg = f"while executing {format_node(node)}{given}{where}: {exc}"
    cls = type(exc) if isinstance(exc, errors.DefunError) else errors.InvalidArgumentError
    raise cls(msg) from exc
