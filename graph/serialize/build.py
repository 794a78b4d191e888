"""Import, step 3: build the validated functions, verify them, attach their gradient records,
compile them for the document's budgets.

Every step goes through the functions callees first (a call, branch or loop body is built,
verified and compiled before the function using it), so nothing recurses on the depth of
the call chain: a chain of 1000 calls loads like 1000 separate functions. Functions are
compiled as written (exports are not optimized), except that loop history nobody reads is
not kept.
"""
import copy
import os

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.ops.shape_rules import check_kinds
from defun.runtime.ops.resource_ops import VariableStore
from defun.runtime.tensor import HandleData, ResourceHandle
from defun.graph.executor import compile_graph
from defun.runtime.collector import paused_gc
from defun.graph.gradients import Backward
from defun.graph.ir import Graph
from defun.graph.nodes import infer_types
from defun.graph.passes import prune_unused_outputs
from defun.graph.verify import verify
from defun.graph.backends import get_backend
from defun.graph.serialize.budget import DEFAULT_MAX_BYTES, DEFAULT_MAX_ITERATIONS, DEFAULT_MAX_OPERATIONS, \
    BudgetBackend
from defun.graph.serialize.schema import format_error
from defun.graph.serialize.loaded import LoadedFunction
from defun.graph.serialize.validate import callees_first, read_document, validate_document


def _build(specs):
    """Every function, callees first: ({name: graph}, names in that order)."""
    library, order = {}, []
    for name in callees_first(specs):
        library[name] = _build_function(specs[name], Graph(name), library)
        order.append(name)
    _pass_handle_types(library, order)
    return library, order


def _pass_handle_types(library, order):
    """Give a called function's resource inputs the value type (handle data) of the variables
    its callers pass: the document records it only where the entry function binds a
    variable, and gradients need it (a handle is differentiable when its value is; a branch
    not reading it gives zeros of its shape). Callers first; a function's inputs are its
    node's last inputs (call, cond, while, scan: a cond's predicate comes first)."""
    for name in reversed(order):
        for node in library[name].nodes:
            for attr in node.op.function_attrs:
                fns = node.attrs[attr]
                for f in fns if isinstance(fns, tuple) else (fns,):
                    params = f.all_inputs
                    for p, t in zip(params, node.inputs[len(node.inputs) - len(params):]):
                        if p.dtype is dtypes.resource and p.handle_data is None:
                            p.handle_data = t.handle_data


def _build_function(spec, g, library):
    values = []
    for s in spec.inputs:
        if s.variable is None:
            values.append([g.placeholder(s.shape, s.dtype)])
            continue
        value = np.array(s.value, copy=True)   # each load owns its variables
        handle = ResourceHandle(VariableStore(value, s.variable),
                                HandleData(value.shape, dtypes.from_numpy(value.dtype)))
        values.append([g.capture(handle)])
    nodes = {}
    for j, ns in enumerate(spec.nodes):
        op = ns.op
        attrs = dict(op.defaults)   # attrs a document leaves out take the declared default
        if op.attrs:
            for key, v in ns.attrs.items():
                kind = op.attrs[key]
                attrs[key] = library[v.name] if kind == "func" else \
                    tuple(library[f.name] for f in v) if kind == "funcs" else v
            for key, kind in op.attrs.items():
                if kind == "transient":
                    attrs[key] = None
        inputs = [values[k][i] for k, i in ns.inputs]
        out_types = _inferred_types(ns, inputs, attrs)
        node = g._new_node(op, inputs, attrs, out_types, ns.site,
                           [nodes[c] for c in ns.control] if ns.control else ())
        if ns.stateful is not None and ns.stateful is not node.stateful:
            raise format_error(ns.path + ".stateful", f"the node says {str(ns.stateful).lower()}, but "
                               f"its op and the functions it runs make it {str(node.stateful).lower()}")
        nodes[len(spec.inputs) + j] = node
        values.append(node.outputs)
    return g.finalize([values[k][i] for k, i in spec.outputs])


def _inferred_types(ns, inputs, attrs):
    """The op's inferred output types, which must equal the recorded ones."""
    op = ns.op
    dts = [t.dtype for t in inputs]
    if op.num_inputs is not None and len(inputs) != op.num_inputs:
        raise format_error(ns.path + ".inputs", f"op {op.name!r} takes {op.num_inputs} "
                           f"input{'s' if op.num_inputs != 1 else ''}, the document gives {len(inputs)}")
    try:
        n = op.output_count(attrs, len(inputs))
    except Exception as e:   # a variadic count reads attrs, which came from the file
        raise format_error(ns.path, f"op {op.name!r} cannot count its outputs: "
                           f"{type(e).__name__}: {e}") from None
    # checked before inference, so an attr like num_split=10**9 never reaches it
    if n != len(ns.outputs):
        raise format_error(ns.path + ".outputs", f"op {op.name!r} makes {n} outputs here, the "
                           f"document records {len(ns.outputs)}")
    try:
        if op.kinds is not None and inputs and dts[0].np.kind not in op.kinds:
            check_kinds(op.name, dts[0], op.kinds)
        if op.same_dtype:
            same = [dts[k] for k in op.same_dtype if k < len(dts)]
            if any(d is not same[0] for d in same):
                raise errors.InvalidArgumentError(
                    f"inputs must have the same dtype, got {', '.join(d.name for d in same)}")
        # the op's inference, remembered by signature as when tracing (a chain of 100,000
        # tanh nodes infers one signature)
        inferred = infer_types(op, inputs, attrs)
        if inferred == ns.outputs:      # as recorded, whose sizes are plain ints already
            return ns.outputs
        inferred = [(tuple(None if d is None else int(d) for d in s), d_) for s, d_ in inferred]
    except Exception as e:   # inference is registry code, but the attrs came from the file
        raise format_error(ns.path, f"op {op.name!r} rejects its inputs or attrs: "
                           f"{type(e).__name__}: {e}") from None
    if len(inferred) != n:
        raise format_error(ns.path + ".outputs", f"op {op.name!r} infers {len(inferred)} outputs, "
                           f"the document records {n}")
    for i, (got, want) in enumerate(zip(inferred, ns.outputs)):
        if got != want:
            s, d = got
            raise format_error(f"{ns.path}.outputs[{i}]", f"recorded as {want[1].name}{list(want[0])} but "
                               f"op {op.name!r} infers {getattr(d, 'name', d)}{list(s)} from its inputs")
    return inferred


# ---------------------------------------------------------------------------------------
# Gradient records -> graph/gradients.py's Backward, kept where defun looks for it

def _attach_gradients(gradients, library):
    """For each record: the function as called for its results (a view without the side
    outputs), with `derived.backward` = (Backward, the function with its side outputs).
    Returns {name: results view}."""
    views = {}
    for r in gradients:       # views first: a record's backward may have a record itself
        full = library[r.function]
        views[r.function] = full if r.results == len(full.outputs) else \
            full.view(full.outputs[:r.results], full.name, full.base_name)
    for r in gradients:
        full = library[r.function]
        # no `outputs`: each side output is an output of its own, past the results
        b = Backward(views.get(r.backward, library[r.backward]), full, r.seeds, r.feeds,
                     full.outputs[r.results:], r.input_grads)
        views[r.function].derived.backward = (b, full)
    return views


# ---------------------------------------------------------------------------------------
# Compiling, callees first, on the document's budget backend

def _compile_all(order, library, views, backend):
    for name in order:
        g = library[name]
        for target in dict.fromkeys([g, views.get(name, g)]):
            target.derived.plans[backend.name] = compile_graph(_without_unread_history(target),
                                                               backend=backend)
            if isinstance(backend, BudgetBackend):
                target.derived.budget = backend     # called from another graph: still here


def _without_unread_history(g):
    if any(n.op.prune_outputs is not None for n in g.nodes):
        return prune_unused_outputs(g)
    return g


def _check_budget(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"load_json: {name} must be an int >= 0, or None for no limit; got {value!r}")


def from_document(doc_or_path, max_bytes=DEFAULT_MAX_BYTES, max_iterations=DEFAULT_MAX_ITERATIONS,
                  backend=None, max_operations=DEFAULT_MAX_OPERATIONS):
    """A LoadedFunction from a document (a dict) or a file path; raises GraphFormatError.

    A path that cannot be read raises the usual OSError. Each load owns fresh copies of the
    document's variables; calls that assign them update those copies (see `.variables`).
    Calls stay within `max_bytes` of computed values, `max_iterations` per loop run and
    `max_operations` per call (None: no limit), or raise ResourceExhaustedError
    (graph/serialize/budget.py). Plans run on `backend` (a name; default numpy), with the
    budgets: numba's compiled regions are metered where they start, from their input shapes.

        f = from_document("model.json")
        y = f(np.ones((2, 3), np.float32))
    """
    _check_budget("max_bytes", max_bytes)
    _check_budget("max_iterations", max_iterations)
    _check_budget("max_operations", max_operations)
    if isinstance(backend, str) or backend is None:
        backend = get_backend(backend)     # ValueError naming the installed backends
    else:
        raise TypeError(f"load_json: backend is the name of an installed backend "
                        f"(df.backends()), got {type(backend).__name__}")
    with paused_gc():    # building makes ~10 objects per node, in reference cycles
        return _load(doc_or_path, max_bytes, max_iterations, max_operations, backend)


def _load(doc_or_path, max_bytes, max_iterations, max_operations, backend):
    try:
        if isinstance(doc_or_path, (str, os.PathLike)):
            doc = read_document(doc_or_path)
        else:
            doc = doc_or_path
        entry, specs, structure, gradients = validate_document(doc)
        library, order = _build(specs)
    except (errors.GraphFormatError, OSError):
        raise
    except RecursionError:
        raise errors.GraphFormatError("document: nested too deeply to read") from None
    except MemoryError:
        raise errors.GraphFormatError("document: too large to read into memory") from None
    except Exception as e:    # a check that should have caught this did not: still a format error
        raise errors.GraphFormatError(f"document: cannot be read: {type(e).__name__}: {e}") from None
    # no budget at all: the backend's kernels as they are (nothing to count)
    if max_bytes is not None or max_iterations is not None or max_operations is not None:
        backend = BudgetBackend(max_bytes, max_iterations, max_operations, base=backend)
    try:
        for name in order:
            verify(library[name], recursive=False)     # callees were verified before
        views = _attach_gradients(gradients, library)
        _compile_all(order, library, views, backend)
    except errors.GraphFormatError:
        raise
    except Exception as e:
        raise errors.GraphFormatError(f"functions: the graph does not compile: {type(e).__name__}: {e}") from None
    names = [s.name for s in specs[entry].inputs if s.variable is None]
    depth, name = 0, entry
    by_function = {r.function: r for r in gradients}
    while name in by_function:
        depth, name = depth + 1, by_function[name].backward
    return LoadedFunction(views.get(entry, library[entry]), backend, names, copy.deepcopy(structure), depth)
