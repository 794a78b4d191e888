"""Per-node timing of a plan: a backend that wraps another's kernels with a clock.

    backend = ProfilingBackend(get_backend("numba"))
    plan = compile_graph(optimize(g), backend=backend)
    plan.run(*arrays)
    backend.stats      # id(step) -> [step, calls, self seconds]
    backend.samples    # id(step) -> the seconds of each call

Each step of the plan (a node, or a region of fused nodes) calls its kernel through a
wrapper that counts the call and its time. A node that runs functions (call, cond, while)
is timed as a whole: the functions it runs are compiled by the wrapped backend, unprofiled,
so the node's time is inclusive and nothing is counted twice. The generated plan is the
wrapped backend's, line for line, buffer reuse (`out=`, positional where the wrapped
backend passes it so) included: the wrapper passes its arguments through.

The clock and the wrapper cost time of their own, which a kernel of a few microseconds
would otherwise be charged with (90 steps of a small chain added up to more than the
unprofiled call): the backend measures what the wrapper records around a kernel that does
nothing (`overhead`, seconds; the median of a few hundred calls, at construction) and
takes it out of every call it records, never below zero.
"""
import statistics
import time

from defun.graph.backends import Backend, Region

__all__ = ["ProfilingBackend"]

_CALIBRATION_CALLS = 300
_clock = time.perf_counter      # the clock of backends made without one (tests set their own)


class ProfilingBackend(Backend):
    """`base`'s plans, each kernel call counted and timed (stats: id(step) -> [step, calls,
    seconds]; samples: id(step) -> per-call seconds), the profiler's own time taken out."""

    def __init__(self, base, clock=None):
        self.base = base
        self.name = f"profile-{base.name}"
        self.stats = {}
        self.samples = {}
        self._originals = {}     # id(wrapper) -> the kernel it wraps (for writes_out & co.)
        self._clock = clock or _clock
        self.overhead = 0.0
        self.overhead = self._calibrate()

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
        # the wrapper passes positional arguments on as they come: the wrapped kernel's
        # own answer holds
        return self.base.out_positional(node, self._originals.get(id(fn), fn))

    def keeps_no_views(self, node):
        return self.base.keeps_no_views(node)

    def _calibrate(self):
        """What the wrapper records around a kernel that does nothing (seconds)."""
        probe = object()
        timed = self._timed(probe, _nothing)
        for _ in range(_CALIBRATION_CALLS):
            timed(probe)
        overhead = statistics.median(self.samples.pop(id(probe)))
        del self.stats[id(probe)], self._originals[id(timed)]
        return overhead

    def _timed(self, step, fn):
        entry = self.stats[id(step)] = [step, 0, 0.0]
        samples = self.samples[id(step)] = []
        clock, overhead, record = self._clock, self.overhead, samples.append

        def timed(*args, **kwargs):
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                seconds = clock() - start - overhead
                if seconds < 0.0:
                    seconds = 0.0
                entry[1] += 1
                entry[2] += seconds
                record(seconds)
        self._originals[id(timed)] = fn
        return timed


def _nothing(*args, **kwargs):
    return None
