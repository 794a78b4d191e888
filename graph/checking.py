"""A backend that checks every step's floating outputs for NaN and Inf (check numerics).

    backend = checking_backend(get_backend("numpy"))
    plan_of(graph, backend).run(*arrays)    # the first NaN or Inf raises NumericsError

Its plans are its base backend's, with a check after each step whose outputs are floating
(`output_check`: one more line in the plan, called with the step's outputs), which raises
runtime.numerics.NumericsError naming the node's op, forward or backward, and the user's
line (for a node traced as a gradient, the line of the forward op whose gradient it
computes: runtime.numerics.BACKWARD_OF). Nodes running functions (call, cond, while) bind
them with this backend, so their nodes check too. Plans are compiled once per (graph,
checking backend), like any other (graph.derived.plans); the base backend's plans carry
no check at all.
"""
import numpy as np

from defun.runtime import numerics
from defun.graph.backends import Backend, Region, get_backend

__all__ = ["CheckingBackend", "checking_backend"]

# a backend's class -> its checking class
_CLASSES = {}


def checking_backend(base):
    """The one CheckingBackend over backend `base` (a name or a Backend): an instance of
    `base`'s class sharing its state (a loaded document's budgets and meter), which also
    checks; functions its nodes run (call, cond, while) bind to it, so they check too."""
    base = get_backend(base)
    if isinstance(base, CheckingBackend):
        return base
    # kept on the base itself (every loaded document has a backend of its own, all named
    # "loaded", holding that document's budgets), so it goes when the base goes
    backend = base.__dict__.get("_checking_twin")
    if backend is None:
        cls = _CLASSES.get(type(base))
        if cls is None:
            cls = _CLASSES[type(base)] = type(f"Checking{type(base).__name__}", (CheckingBackend, type(base)), {})
        backend = object.__new__(cls)
        backend.__dict__.update(base.__dict__)
        backend.name = f"check_numerics-{base.name}"
        backend.checked_base = base
        base._checking_twin = backend
    return backend


class CheckingBackend(Backend):
    """Mixed into a backend's class: its plans with each step's floating outputs checked for
    NaN and Inf (`checked_base`: the backend it checks)."""

    checked_base = None

    def output_check(self, step):
        outputs = step.outputs
        region = isinstance(step, Region)
        producers = [t.node for t in outputs] if region else [step] * len(outputs)
        checked = [(k, _describer(n)) for k, (t, n) in enumerate(zip(outputs, producers)) if t.dtype.is_inexact]
        if not checked:
            return None
        check = numerics.check_value

        def check_outputs(values, inputs):
            for k, describe in checked:
                v = values[k]
                if hasattr(v, "dtype"):
                    if region:
                        describe = _first_in_region(step, inputs, describe)
                    check(v, describe)
        return check_outputs


def _first_in_region(region, inputs, describe):
    """`describe(kind)` naming the first node of fused `region` whose output is not finite
    (its nodes run one by one on numpy's kernels, from the region's `inputs`; only when an
    output of the region is), else `describe` itself."""
    def first(kind):
        values = {id(t): v for t, v in zip(region.inputs, inputs)}
        try:
            with np.errstate(all="ignore"):     # the region's own run warned already
                return _first_bad(region, values) or describe(kind)
        except Exception:   # noqa: BLE001 - only a better name was sought: keep the region's
            return describe(kind)
    return first


def _first_bad(region, values):
    """The message naming the first node of `region` that makes a NaN or Inf, or None."""
    numpy = get_backend("numpy")
    for node in region.nodes:
        fn, pass_attrs = numpy.kernel(node)
        args = [values[id(t)] if id(t) in values else t.node.attrs["value"] for t in node.inputs]
        out = fn(*args, **node.attrs) if pass_attrs else fn(*args)
        outs = (out,) if node.op.single else tuple(out)
        for t, v in zip(node.outputs, outs):
            values[id(t)] = v
            kind = numerics.bad_value(v) if t.dtype.is_inexact else None
            if kind is not None:
                return _describer(node)(kind)
    return None


def _describer(node):
    """`describe(kind)`: the error message for a NaN or Inf out of `node`."""
    graph = node.graph
    of = numerics.forward_site(graph.name, node.id)
    op = f"{node.op.name} ({node.name} of {graph.base_name})"
    if of is not None:
        return lambda kind: numerics.numerics_message(kind, op, True, of[1], of[0])
    backward = graph.base_name.endswith("_grad")
    return lambda kind: numerics.numerics_message(kind, op, backward, node.site)
