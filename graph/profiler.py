"""Per-node timing of a plan: a backend that wraps another's kernels with a clock.

    backend = ProfilingBackend(get_backend("numba"))
    plan = compile_graph(optimize(g), backend=backend)
    plan.run(*arrays)
    backend.stats      # id(step) -> [step, calls, self seconds]

Each step of the plan (a node, or a region of fused nodes) calls its kernel through a
wrapper that counts the call and its time. A node that runs functions (call, cond, while)
is timed as a whole: the functions it runs are compiled by the wrapped backend, unprofiled,
so the node's time is inclusive and nothing is counted twice. The generated plan is the
wrapped backend's, line for line, but for buffer reuse (`out=`), which it keeps too: the
wrapper passes keywords through.
"""
import time

from defun.graph.backends import Backend, Region

__all__ = ["ProfilingBackend"]


class ProfilingBackend(Backend):
    """`base`'s plans, each kernel call counted and timed (stats: id(step) -> [step, calls,
    seconds])."""

    def __init__(self, base):
        self.base = base
        self.name = f"profile-{base.name}"
        self.stats = {}
        self._originals = {}     # id(wrapper) -> the kernel it wraps (for writes_out & co.)

    def partition(self, nodes, outputs):
        steps = self.base.partition(nodes, outputs)
        for step in steps:
            if isinstance(step, Region):
                step.kernel = self._timed(step, step.kernel)
        return steps

    def kernel(self, node):
        fn, pass_attrs = self.base.kernel(node)
        return self._timed(node, fn), pass_attrs

    def writes_out(self, node, fn):
        return self.base.writes_out(node, self._originals.get(id(fn), fn))

    def out_positional(self, node, fn):
        # the wrapper takes `out` as a keyword only: a positional buffer would need the
        # wrapped ufunc's own signature
        return False

    def keeps_no_views(self, node):
        return self.base.keeps_no_views(node)

    def _timed(self, step, fn):
        entry = self.stats[id(step)] = [step, 0, 0.0]
        clock = time.perf_counter

        def timed(*args, **kwargs):
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                entry[1] += 1
                entry[2] += clock() - start
        self._originals[id(timed)] = fn
        return timed
