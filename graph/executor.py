"""The executor: compile a function graph once into straight-line Python over numpy.

`compile_graph(graph)` decides the order at compile time (creation order is topological
and keeps stateful ops in program order), binds every kernel and attr, drops each value
after its last use, and generates one Python function whose body is one line per node.
Names in the generated source are made here (a0, v3, k3), never taken from a graph or file.
Per call the cost is the kernels plus one Python call per node.
"""
import sys

from runtime import errors
from runtime.ops.resource_ops import ASSIGN_OPS

__all__ = ["compile_graph", "Plan", "live_nodes"]


def live_node_ids(graph, outputs=None):
    """ids of the nodes `outputs` (default: the graph's) or an effect depends on.

    Effects are stateful ops and ops running a function that contains one (a call of a
    function that assigns a variable runs even when its outputs are unused).
    """
    from graph.verify import is_effectful
    outputs = graph.outputs if outputs is None else outputs
    memo = {}
    stack = [t.node for t in outputs] + [n for n in graph.nodes if is_effectful(n, memo)]
    live = set()
    while stack:
        n = stack.pop()
        if id(n) in live:
            continue
        live.add(id(n))
        stack.extend(t.node for t in n.inputs)
        stack.extend(n.control_inputs)
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


def compile_graph(graph, outputs=None, name=None):
    """Compile `graph` (its all_inputs -> `outputs`, default graph.outputs) into a Plan."""
    outputs = list(graph.outputs if outputs is None else outputs)
    inputs = graph.all_inputs
    nodes = live_nodes(graph, outputs)
    ns = {"_fail": _fail, "_rollback": _rollback}
    var_of = {}
    for i, t in enumerate(inputs):
        var_of[id(t)] = f"a{i}"
    input_nodes = {id(t.node) for t in inputs}

    # last use of each value (by position in `nodes`), to free buffers early
    last_use = {}
    for pos, n in enumerate(nodes):
        for t in n.inputs:
            last_use[id(t)] = pos
    keep = {id(t) for t in outputs}

    lines = []
    line_node = {}
    has_assign = any(n.op.name in ASSIGN_OPS for n in nodes)
    body_indent = "        "
    for pos, n in enumerate(nodes):
        if id(n) in input_nodes:
            continue
        if n.op.name == "placeholder":
            raise errors.InvalidArgumentError(
                f"function {graph.name!r}: placeholder {n.name} is not one of its inputs")
        if n.op.name == "const":
            cname = f"c{n.id}"
            ns[cname] = n.attrs["value"]
            var_of[id(n.outputs[0])] = cname
            continue
        kname = f"k{n.id}"
        fn, pass_attrs = _default_bind(n.op, n.attrs)
        ns[kname] = fn
        args = [var_of[id(t)] for t in n.inputs]
        if pass_attrs:
            for j, (k, v) in enumerate(sorted(n.attrs.items())):
                an = f"t{n.id}_{j}"
                ns[an] = v
                args.append(f"{k}={an}")
        call = f"{kname}({', '.join(args)})"
        outs = n.outputs
        if n.op.name in ASSIGN_OPS:
            h = var_of[id(n.inputs[0])]
            lines.append(f"{body_indent}_u.append(({h}, {h}.value))")
        if not outs:
            stmt = call
        elif len(outs) == 1 and n.op.single:
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
        # free inputs whose last use is this node
        dead = [var_of[id(t)] for t in n.inputs
                if last_use.get(id(t)) == pos and id(t) not in keep and var_of[id(t)].startswith("v")]
        if dead:
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
        head.append("    _u = []")
    head.append("    try:")
    offset = len(head)
    tail = [f"{body_indent}return ({ret}{',' if len(outputs) == 1 else ''})",
            "    except Exception as _e:"]
    if has_assign:
        tail.append("        _rollback(_u)")
    tail.append("        _fail(_e)")
    src_lines = head + lines + tail
    source = "\n".join(src_lines) + "\n"
    code = compile(source, f"<defun plan {graph.name}>", "exec")
    exec(code, ns)
    run = ns[fname]
    lineno_node = {offset + k: n for k, n in line_node.items()}
    ns["_lines"] = lineno_node
    ns["_code"] = run.__code__
    plan = Plan()
    plan.run = run
    plan.source = source
    plan.graph = graph
    plan.num_inputs = len(inputs)
    plan.num_outputs = len(outputs)
    plan._lines = lineno_node
    return plan


def _rollback(undo):
    for h, old in reversed(undo):
        h.value = old


def _fail(exc):
    """Re-raise a kernel failure naming the node that was executing."""
    tb = exc.__traceback__
    frame_globals = sys._getframe(1).f_globals
    code = frame_globals["_code"]
    node = None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            node = frame_globals["_lines"].get(tb.tb_lineno)
        tb = tb.tb_next
    if node is None:
        raise exc
    from graph.printer import format_node
    from runtime import sites
    where = f" (traced at {sites.format_site(node.site)})" if node.site else ""
    msg = f"while executing {format_node(node)}{where}: {exc}"
    cls = type(exc) if isinstance(exc, errors.DefunError) else errors.InvalidArgumentError
    raise cls(msg) from exc
