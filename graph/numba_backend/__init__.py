"""The numba backend: fused elementwise chains and reductions, one compiled loop per stage.

`df.defun(f, backend="numba")` (extra `[fast]`). Partitioning (graph/numba_backend/plan.py)
turns each run of fusible nodes (ops with a fused form, runtime/fused.py: elementwise ops,
reductions, 2-D matmuls of any size, the sparse cross-entropy) into a `Region` whose
kernel is one numba function (graph/numba_backend/codegen.py) written to the on-disk cache
and compiled on its first call (graph/numba_backend/jit.py), so a step made only of such
ops is one compiled call. Repetitions in a run (a Python loop the trace unrolled, and its
backward) are compiled once, as a loop (graph/numba_backend/rolling.py); what remains is
cut into regions of at most `MAX_REGION` nodes, so compile time stays linear in a graph's
size. Every other node keeps its numpy kernel; nested functions (call, cond, while)
compile for this backend too.

A region whose fused code raises (a case it leaves to numpy, a bad label) runs again on
numpy kernels, which gives numpy's result or its error; `stats["fallbacks"]` counts those.
This module imports numba only when a region is first built: without numba installed the
backend is not installed, and asking for it names the extra.
"""
import importlib.util
import warnings

from defun.graph.backends import NumpyBackend, Region, get_backend, needs_extra, register_backend
from defun.graph.nodes import CONST, PLACEHOLDER
from defun.graph.numba_backend.codegen import region_source
from defun.graph.numba_backend.plan import Rolled, fused_form, stages_of
from defun.graph.numba_backend.rolling import roll

__all__ = ["NumbaBackend", "available", "stats"]

stats = {"regions": 0, "fallbacks": 0}


def available():
    """True if numba can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):     # ValueError: sys.modules["numba"] is None (blocked)
        return False


class NumbaBackend(NumpyBackend):
    """numpy kernels, except that runs of fusible nodes become compiled regions."""

    name = "numba"
    MIN_REGION = 2      # a lone op stays numpy's (its ufunc loop is as fast, with no dispatch)
    # A longer run is cut into regions of at most this many nodes (a rolled block counting
    # as one repetition): numba's (LLVM's) time to compile one function grows faster than
    # its length (one region of 100 mixed nodes took 49 s, of 200 nodes 131 s), so compiling
    # a long document stays linear in its nodes; a cut costs one array between two regions.
    MAX_REGION = 32

    def partition(self, nodes, outputs):
        last_use = {}
        for k, n in enumerate(nodes):
            for t in n.inputs:
                last_use[id(t)] = k
        for t in outputs:
            last_use[id(t)] = len(nodes)
        index = {id(n): k for k, n in enumerate(nodes)}
        steps, run, held = [], [], []

        def close():
            steps.extend(held)     # constants first: they read nothing
            if len(run) >= self.MIN_REGION:
                for chunk in self._chunks(roll(run)):
                    flat = _flat(chunk)
                    if len(flat) >= self.MIN_REGION:
                        steps.append(self._region(chunk, flat, last_use, index[id(flat[-1])] + 1))
                    else:
                        steps.extend(flat)
            else:
                steps.extend(run)
            run.clear()
            held.clear()
        for n in nodes:
            if n.op is CONST or n.op is PLACEHOLDER:
                (held if run else steps).append(n)
            elif fused_form(n) is not None:
                run.append(n)
            else:
                close()
                steps.append(n)
        close()
        return steps

    def _chunks(self, items):
        """`items` (nodes and rolled blocks) cut into regions of at most MAX_REGION nodes to
        compile, a rolled block counting as one repetition (it is compiled once)."""
        chunks, size = [[]], 0
        todo = list(items)[::-1]        # popped in order
        while todo:
            it = todo.pop()
            cost = it.period if isinstance(it, Rolled) else 1
            if size + cost > self.MAX_REGION and chunks[-1]:
                chunks.append([])
                size = 0
            if isinstance(it, Rolled) and not _reads_within(it, chunks[-1]):
                todo.extend(it.nodes[::-1])     # it indexes a block of another region: written out
                continue
            chunks[-1].append(it)
            size += cost
        return chunks

    def _region(self, items, run, last_use, end):
        # function-level: jit imports numba, which only building a region needs
        from defun.graph.numba_backend.jit import is_compile_error, load_region  # imports numba
        inside = {id(t) for n in run for t in n.outputs}
        inputs, seen = [], set()
        for n in run:
            for t in n.inputs:
                if id(t) not in inside and id(t) not in seen:
                    seen.add(id(t))
                    inputs.append(t)
        outputs = [t for n in run for t in n.outputs if last_use.get(id(t), -1) >= end]
        stages, where = stages_of(items)
        source, args = region_source(stages, where, inputs, outputs)
        fused = load_region(source)
        slow = _numpy_runner(run, args, outputs)
        stats["regions"] += 1
        what = f"the fused region of {len(run)} nodes from {run[0].name} in {run[0].graph.name!r}"
        return Region(run, args, outputs, _with_fallback(fused, slow, is_compile_error, what), "numba")


def _reads_within(block, chunk):
    """True if every block whose repetitions `block` indexes is in `chunk` (one region)."""
    return all(c[1] in chunk for row in block.classes for c in row if c[0] == "stack")


def _flat(items):
    return [n for it in items for n in (it.nodes if isinstance(it, Rolled) else (it,))]


def _numpy_runner(nodes, args, outputs):
    """The region on numpy kernels (the nodes one by one), with the fused kernel's signature;
    a value inside it is dropped after its last reader (the region's memory stays near the
    fused loops', which a loaded document's budget counts)."""
    numpy = get_backend("numpy")
    last = {}
    for n in nodes:
        for t in n.inputs:
            last[id(t)] = n
    keep = {id(t) for t in outputs}
    steps = [(n, *numpy.kernel(n), [id(t) for t in dict.fromkeys(n.inputs)
                                    if last.get(id(t)) is n and id(t) not in keep])
             for n in nodes]

    def run(*values):
        env = {id(t): v for t, v in zip(args, values)}
        try:
            for n, fn, pass_attrs, dead in steps:
                vals = [env[id(t)] if id(t) in env else t.node.attrs["value"] for t in n.inputs]
                out = fn(*vals, **n.attrs) if pass_attrs else fn(*vals)
                for k in dead:
                    env.pop(k, None)
                if n.op.single:
                    env[id(n.outputs[0])] = out
                else:
                    for t, o in zip(n.outputs, out):
                        env[id(t)] = o
        except Exception as e:
            try:
                e.failed_node = (n, vals)   # the plan names this node, its values and line, not the region's first
            except AttributeError:      # an exception without attributes of its own: the region is named
                pass
            raise
        return tuple(env[id(t)] for t in outputs)
    return run


def _with_fallback(fused, slow, is_compile_error, what):
    run = [fused]

    def region(*args):
        try:
            return run[0](*args)
        except Exception as e:
            # numpy decides: the result where the loops left a case to it, else its error
            stats["fallbacks"] += 1
            if is_compile_error(e):     # numba cannot compile it (for these argument types)
                warnings.warn(f"numba backend: {what} failed to compile, so it runs on numpy: {e}",
                              RuntimeWarning)
                run[0] = slow
            return slow(*args)
    return region


if available():
    register_backend(NumbaBackend())
else:
    needs_extra("numba", "fast")
