"""`df.profile`: where a function's time goes, node by node (the user's line beside each).

    rows = df.profile(step, x, y, repeat=10)
    print(rows)          # a table sorted by time: node, op, line, calls, seconds, share

The function runs `repeat` times on a plan compiled like its own (the optimized graph on
its backend; a loaded function's graph as loaded, on its budgets), each kernel call timed
(graph/profiler.py, which takes its own time out). A row's seconds are its median call
times its calls: a busy machine's pauses, which land in one call of one node, do not make
the nodes add up to more than a typical call. A node running functions (call, cond, while) counts what they run; a
numba region is one row, named by its first node, its op "fused" and its nodes listed.
"""
import collections
import statistics

from defun.runtime import sites
from defun.runtime.nest import flatten
from defun.graph.backends import Region, get_backend
from defun.graph.executor import compile_graph
from defun.graph.passes import optimize, prune_unused_outputs
from defun.graph.printer import format_attr
from defun.graph.profiler import ProfilingBackend
from defun.graph.serialize import LoadedFunction
from defun.concrete import ConcreteFunction
from defun.function import Function
from defun.graph_function import _eager_value

__all__ = ["profile", "ProfileRow", "Profile"]

ProfileRow = collections.namedtuple("ProfileRow", "node op line calls seconds share")
ProfileRow.__doc__ = """One step of the plan: node name, op, user line ('' if unknown), calls,
seconds over the profiled calls (its median call times its calls, the profiler's own time
taken out), share of the time of all steps."""


class Profile(list):
    """ProfileRow per step, slowest first; printed, a table with the total."""

    def __init__(self, rows, function, repeat, overhead=0.0):
        super().__init__(rows)
        self.function, self.repeat, self.overhead = function, repeat, overhead

    @property
    def total_seconds(self):
        return sum(r.seconds for r in self)

    def __str__(self):
        head = ("node", "op", "calls", "total", "share", "line")
        body = [(r.node, r.op, str(r.calls), _duration(r.seconds), f"{100 * r.share:.1f}%", r.line)
                for r in self]
        widths = [max(len(x[k]) for x in [head] + body) for k in range(5)]
        fmt = "  ".join(f"{{:{'>' if k in (2, 3, 4) else '<'}{w}}}" for k, w in enumerate(widths)) + "  {}"
        lines = [f"# @{self.function}: {len(self)} steps over {self.repeat} calls, "
                 f"{_duration(self.total_seconds)} in kernels "
                 f"({_duration(self.total_seconds / max(self.repeat, 1))} per call; the profiler's "
                 f"own {_duration(self.overhead)} per kernel call taken out)",
                 fmt.format(*head).rstrip()]
        lines += [fmt.format(*row).rstrip() for row in body]
        return "\n".join(lines)

    __repr__ = __str__


def profile(f, *args, repeat=10, **kwargs):
    """Run `f(*args, **kwargs)` `repeat` times, each node timed: a Profile (rows slowest first).

    `f` is a df.defun, a ConcreteFunction or a loaded function (df.load_json), on its own
    backend. Nothing it computes is returned; assignments to variables happen `repeat` times.

    >>> print(df.profile(step, x, y))
    # @step: 7 steps over 10 calls, 1.204 ms in kernels (120.4 us per call; the profiler's own
    # 0.2 us per kernel call taken out)
    node  op      calls  total     share  line
    %4    matmul     10  801.0 us  66.5%  train.py:12: h = x @ w
    ...
    """
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"profile: repeat must be an int >= 1, got {repeat!r}")
    if isinstance(f, Function):
        cf = f.get_concrete_function(*args, **kwargs)
        _, tensors = f._key_and_tensors(args, kwargs)
        return _profile_concrete(cf, tensors, repeat)
    if isinstance(f, ConcreteFunction):
        if f._function is not None:
            _, tensors = f._function._key_and_tensors(args, kwargs)
        else:
            tensors = flatten((args, kwargs))
        return _profile_concrete(f, tensors, repeat)
    if isinstance(f, LoadedFunction):
        feed = f._arguments(f._bind(args, kwargs) if kwargs else args)
        graph = f.graph
        if any(n.op.prune_outputs is not None for n in graph.nodes):
            graph = prune_unused_outputs(graph)      # as the loader compiles it
        return _run(graph, f.backend, feed + f._captured, repeat, f.graph.name)
    raise TypeError(f"profile expects a df.defun, a ConcreteFunction or a loaded function "
                    f"(df.load_json), got {type(f).__name__}")


def _profile_concrete(cf, tensors, repeat):
    if len(tensors) != len(cf.graph.inputs):
        raise TypeError(f"profile: {cf.name} takes {len(cf.graph.inputs)} tensor arguments, "
                        f"got {len(tensors)}")
    values = [_eager_value(t) for t in tensors] + [t._value for t in cf._captured]
    return _run(optimize(cf.graph), get_backend(cf._fn.backend), values, repeat, cf.graph.base_name)


def _run(graph, backend, values, repeat, name):
    timed = ProfilingBackend(backend)
    plan = compile_graph(graph, backend=timed)
    for _ in range(repeat):
        plan.run(*values)
    typical = {key: (step, calls, statistics.median(timed.samples[key]) * calls if calls else 0.0)
               for key, (step, calls, _) in timed.stats.items()}
    total = sum(seconds for _, _, seconds in typical.values()) or 1.0
    rows = [_row(step, calls, seconds, total) for step, calls, seconds in typical.values()]
    rows.sort(key=lambda r: -r.seconds)
    return Profile(rows, name, repeat, timed.overhead)


def _row(step, calls, seconds, total):
    if isinstance(step, Region):
        first = step.nodes[0]
        ops = ", ".join(dict.fromkeys(n.op.name for n in step.nodes))
        return ProfileRow(first.name, f"fused({ops})", _line(first), calls, seconds, seconds / total)
    op = step.op.name
    funcs = [f"{k}={format_attr(step.attrs[k])}" for k in sorted(step.op.function_attrs) if k in step.attrs]
    if funcs:       # while {body=@b, cond=@c}: the functions it runs, as the listing names them
        op += " {" + ", ".join(funcs) + "}"
    return ProfileRow(step.name, op, _line(step), calls, seconds, seconds / total)


def _line(node):
    if not node.site:
        return ""
    text = sites.source_line(node.site)
    return sites.format_site(node.site) + (f": {text}" if text else "")


def _duration(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"
