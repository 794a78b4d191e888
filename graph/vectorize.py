"""The batching transform's walker: a per-example graph rewritten, node by node, into batched ops.

`BatchContext.run_graph(g, values, batched)` walks function graph `g` in order. A node whose
inputs are all unbatched runs as it is (`run_op`); any other node runs its op row's batching
rule (`OpDef.batch`, runtime/batching.py), which emits ordinary ops on values carrying the
batch at axis 0. The ops go wherever ops go: eagerly (and onto the tapes listening), or
into the graph being traced, so a vmapped function inside a defun is an ordinary graph,
one node per op. Before / after, for `f(x) = reduce_sum(x * w)` with x batched (B=8):

    %1 = multiply(%x: f32[3], %w: f32[3])       %1 = multiply(%x: f32[8,3], %w: f32[3])
    %2 = reduce_sum(%1) {axis=None}       ->    %2 = reduce_sum(%1) {axis=(1,)}

An op with no rule raises UnimplementedError naming it and the user's line; with
`fallback=True` it runs once per example instead (and the caller warns): a Python loop
when the batch size is known while tracing, else one `scan` node over the examples.
"""
from defun.runtime import errors, sites
from defun.runtime.batching import emit
from defun.runtime.execute import run_op
from defun.runtime.context import state
from defun.runtime.registry import get as get_op
from defun.runtime.tensor import Tensor
from defun.graph.ir import Graph, unique_name
from defun.graph.nodes import SymbolicTensor
from defun.graph.scan import _trace_rows, scan_node

__all__ = ["BatchContext"]


def _where(node):
    site = node.site
    line = sites.source_line(site)
    return sites.format_site(site) + (f": {line}" if line else "")


class BatchContext:
    """One batching: the batch size, whether ops without a rule may loop, what looped."""

    __slots__ = ("size", "size_t", "fallback", "fell_back", "envs")

    def __init__(self, size, fallback=False, size_t=None):
        self.size = size          # the batch size, None when known only when the batch runs
        self.size_t = size_t      # then: a scalar int32 tensor holding it
        self.fallback = fallback
        self.fell_back = []       # (op name, user site) of each op run once per example
        self.envs = []            # per graph being walked (innermost last): {id(tensor): (value, batched)}

    def run_graph(self, graph, values, batched):
        """Outputs of `graph` (values, batched flags) given its `all_inputs` as `values`."""
        env = {}
        for ph, v, b in zip(graph.all_inputs, values, batched):
            env[id(ph)] = (v, b)
        self.envs.append(env)
        st = state
        outer_site = st.node_site
        try:
            for node in graph.nodes:
                if node.op.name == "placeholder":
                    continue
                ins = [env[id(t)] for t in node.inputs]
                st.node_site = node.site or outer_site      # where its ops are (runtime/context.py)
                outs, flags = self.run_node(node, [v for v, _ in ins], [b for _, b in ins])
                for t, o, b in zip(node.outputs, outs, flags):
                    env[id(t)] = (o, b)
        finally:
            st.node_site = outer_site
            self.envs.pop()
        res = [env[id(t)] for t in graph.outputs]
        return [v for v, _ in res], [b for _, b in res]

    def scope(self):
        """What the graphs being walked have computed so far (kept by reference): for
        `call_batched` later, when a function traced on one example reads their tensors."""
        return tuple(reversed(self.envs))

    def call_batched(self, fn, example, values, scope, where):
        """`fn(*xs)` for one example (`example`: per-example tensors giving the placeholders'
        types; `fn` returns a flat list of tensors or None), traced in a function graph inside
        `where` (the per-example graph whose tensors `fn` may read, as a closure does), then
        run on the batched `values`: each tensor of `where` (or a graph it is in) `fn` reads
        takes its batched value from `scope`. Returns the results (None kept) and their flags."""
        g = Graph(unique_name("vmap_call"), outer=where, base_name="vmap_call")
        st = state
        node_site, st.node_site = st.node_site, None      # the user's function: its own lines
        try:
            with g.building():
                got = list(fn(*[g.placeholder(t.shape, t.dtype, t.handle_data) for t in example]))
                outs = [_own(g, o) for o in got if o is not None]
        finally:
            st.node_site = node_site
        g.finalize(outs)
        feed, feed_flags = list(values), [True] * len(values)
        for outer in g.captured_values:
            hit = next((env[id(outer)] for env in scope if id(outer) in env), None)
            feed.append(outer if hit is None else hit[0])
            feed_flags.append(hit is not None and hit[1])
        res, flags = self.run_graph(g, feed, feed_flags)
        res, flags = iter(res), iter(flags)
        pairs = [(next(res), next(flags)) if o is not None else (None, False) for o in got]
        return [v for v, _ in pairs], [b for _, b in pairs]

    def run_node(self, node, inputs, batched):
        op = node.op
        if op.stateful and op.name not in ("read_variable", "print"):
            raise errors.InvalidArgumentError(
                f"vmap: {op.name} assigns a variable inside a vmapped function (at {_where(node)}); "
                f"a batched function cannot change state: return the per-example values and "
                f"assign their reduction outside")
        if not any(batched) and not op.function_attrs:
            return emit(node, inputs), [False] * len(node.outputs)
        rule = op.batch
        if callable(rule):
            try:
                return rule(self, node, inputs, batched)
            except errors.UnimplementedError as e:
                if str(e).startswith("vmap: "):     # from a node inside this one's functions
                    raise
                if not self.fallback:
                    raise errors.UnimplementedError(f"vmap: {e} (at {_where(node)})") from None
                return self._loop(node, inputs, batched, f"its batching rule does not cover this case ({e})")
        reason = f"; {rule}" if isinstance(rule, str) else ""
        if not self.fallback:
            raise errors.UnimplementedError(
                f"vmap: op {op.name} (at {_where(node)}) has no batching rule{reason}. Pass "
                f"fallback_to_while_loop=True to df.vectorized_map to run it once per example, "
                f"or batch that step by hand")
        return self._loop(node, inputs, batched, f"it has no batching rule{reason}")

    def function(self, graph, flags, extra, extra_flags, base):
        """A new function graph computing function `graph` batched, in the current context:
        its first `len(flags)` inputs become placeholders (batched where `flags` says),
        the rest of `graph.all_inputs` stand for the outer values `extra` (captured where
        used; batched as `extra_flags` says). Returns (the graph, still open, its outputs,
        their flags); the caller adds what it needs (`with g.building():`) and finalizes it."""
        g = Graph(unique_name(base), outer=state.graph, base_name=base)
        n = len(flags)
        with g.building():
            phs = [g.placeholder(((self.size,) if f else ()) + tuple(t.shape), t.dtype, t.handle_data)
                   for t, f in zip(graph.all_inputs[:n], flags)]
            outs, out_flags = self.run_graph(graph, phs + list(extra), list(flags) + list(extra_flags))
            outs = [o if isinstance(o, SymbolicTensor) and o.node.graph is g else
                    run_op(get_op("identity"), [o]) for o in outs]
        return g, outs, out_flags

    def _loop(self, node, inputs, batched, why):
        """`node` run once per example, the results stacked: the fallback."""
        if node.op.function_attrs:
            raise errors.UnimplementedError(
                f"vmap: op {node.op.name} (at {_where(node)}) cannot be batched ({why}) nor run per example")
        self.fell_back.append((node.op.name, node.site, why))
        if self.size is None:       # known when the batch runs: one scan node over the examples
            rows = [(tuple(t.shape), t.dtype, t.handle_data) for t, b in zip(node.inputs, batched) if b]

            def one(*row):
                row = iter(row)
                return [_own(state.graph, o) for o in emit(node, [next(row) if b else x
                                                                  for x, b in zip(inputs, batched)])]
            body = _trace_rows("vmap_fallback", rows, one)
            return scan_node(body, [], [x for x, b in zip(inputs, batched) if b]), [True] * len(node.outputs)
        per = []
        for i in range(self.size):
            xs = [x[i] if b else x for x, b in zip(inputs, batched)]
            per.append(emit(node, xs))
        for k in range(len(node.outputs)):
            shapes = {tuple(p[k].shape) for p in per}
            if len(shapes) > 1:
                raise errors.InvalidArgumentError(
                    f"vmap: op {node.op.name} (at {_where(node)}) gives examples of different shapes "
                    f"({', '.join(map(str, sorted(shapes)))}); a batch holds one shape per output")
        stack = get_op("stack")
        outs = [run_op(stack, [p[k] for p in per], {"axis": 0}) for k in range(len(node.outputs))]
        return outs, [True] * len(outs)


def _own(g, t):
    """`t` as an output of function graph `g` (an identity when `g` did not compute it)."""
    if isinstance(t, SymbolicTensor) and t.node.graph is g:
        return t
    if not isinstance(t, Tensor):
        return t._as_tensor() if hasattr(t, "_as_tensor") else g.constant(t)
    return run_op(get_op("identity"), [t])
