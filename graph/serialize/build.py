"""Import, step 3: build the validated functions (callees first), verify, compile."""
import copy
import os

import numpy as np

from runtime import dtypes, errors
from runtime.ops._infer import check_kinds
from runtime.ops.resource_ops import VariableStore
from runtime.tensor import HandleData, ResourceHandle
from graph.executor import compile_graph
from graph.ir import Graph
from graph.verify import verify
from graph.serialize.schema import _format_error
from graph.serialize.loaded import LoadedFunction
from graph.serialize.validate import _read_document, _validate, call_graph_of


def _build(entry, specs):
    """Build every function, callees first; returns the entry's graph."""
    import networkx as nx
    library = {}
    for name in nx.lexicographical_topological_sort(call_graph_of(specs).reverse(copy=False)):
        library[name] = _build_function(specs[name], Graph(name), library)
    return library[entry]


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
        attrs = dict(ns.op.defaults)   # attrs a document leaves out take the declared default
        for key, v in ns.attrs.items():
            kind = ns.op.attrs[key]
            attrs[key] = library[v.name] if kind == "func" else \
                tuple(library[f.name] for f in v) if kind == "funcs" else v
        for key, kind in ns.op.attrs.items():
            if kind == "transient":
                attrs[key] = None
        inputs = [values[k][i] for k, i in ns.inputs]
        out_types = _inferred_types(ns, inputs, attrs)
        node = g._new_node(ns.op, inputs, attrs, out_types, None, [nodes[c] for c in ns.control])
        if ns.stateful is not None and ns.stateful is not node.stateful:
            raise _format_error(ns.path + ".stateful", f"the node says {str(ns.stateful).lower()}, but "
                                f"its op and the functions it runs make it {str(node.stateful).lower()}")
        nodes[len(spec.inputs) + j] = node
        values.append(node.outputs)
    return g.finalize([values[k][i] for k, i in spec.outputs])


def _inferred_types(ns, inputs, attrs):
    """The op's inferred output types, which must equal the recorded ones."""
    op = ns.op
    dts = [t.dtype for t in inputs]
    if op.num_inputs is not None and len(inputs) != op.num_inputs:
        raise _format_error(ns.path + ".inputs", f"op {op.name!r} takes {op.num_inputs} "
                            f"input{'s' if op.num_inputs != 1 else ''}, the document gives {len(inputs)}")
    try:
        n = op.output_count(attrs, len(inputs))
    except Exception as e:   # a variadic count reads attrs, which came from the file
        raise _format_error(ns.path, f"op {op.name!r} cannot count its outputs: "
                            f"{type(e).__name__}: {e}") from None
    # checked before inference, so an attr like num_split=10**9 never reaches it
    if n != len(ns.outputs):
        raise _format_error(ns.path + ".outputs", f"op {op.name!r} makes {n} outputs here, the "
                            f"document records {len(ns.outputs)}")
    try:
        if op.kinds is not None and inputs and dts[0].np.kind not in op.kinds:
            check_kinds(op.name, dts[0], op.kinds)
        same = [dts[k] for k in (op.same_dtype or ()) if k < len(dts)]
        if any(d is not same[0] for d in same):
            raise errors.InvalidArgumentError(
                f"inputs must have the same dtype, got {', '.join(d.name for d in same)}")
        inferred = [(tuple(None if d is None else int(d) for d in s), d_)
                    for s, d_ in op.infer([t.shape for t in inputs], dts, attrs)]
    except Exception as e:   # inference is registry code, but the attrs came from the file
        raise _format_error(ns.path, f"op {op.name!r} rejects its inputs or attrs: "
                            f"{type(e).__name__}: {e}") from None
    if len(inferred) != n:
        raise _format_error(ns.path + ".outputs", f"op {op.name!r} infers {len(inferred)} outputs, "
                            f"the document records {n}")
    for i, (got, want) in enumerate(zip(inferred, ns.outputs)):
        if got != want:
            s, d = got
            raise _format_error(f"{ns.path}.outputs[{i}]", f"recorded as {want[1].name}{list(want[0])} but "
                                f"op {op.name!r} infers {getattr(d, 'name', d)}{list(s)} from its inputs")
    return inferred


def from_document(doc_or_path):
    """A LoadedFunction from a document (a dict) or a file path; raises GraphFormatError.

    A path that cannot be read raises the usual OSError. Each load owns fresh copies of the
    document's variables; calls that assign them update those copies (see `.variables`).

        f = from_document("model.json")
        y = f(np.ones((2, 3), np.float32))
    """
    if isinstance(doc_or_path, (str, os.PathLike)):
        doc = _read_document(doc_or_path)
    else:
        doc = doc_or_path
    entry, specs, structure = _validate(doc)
    g = _build(entry, specs)
    try:
        verify(g)
        plan = compile_graph(g)
    except Exception as e:
        raise errors.GraphFormatError(f"functions: the graph does not compile: {type(e).__name__}: {e}") from None
    names = [s.name for s in specs[entry].inputs if s.variable is None]
    return LoadedFunction(g, plan, names, copy.deepcopy(structure))


