"""ONNX export of a function graph: each op's ONNX form (its registry row) over one emitter.

    model = to_onnx(graph, captured_values, input_names, output_names, opset=17)

The graph is optimized first, as a plan would be (calls inlined, constants folded, dead
code and unused outputs pruned), and so is every function it reaches. Each node then emits
ONNX nodes through its op's `onnx` form (runtime.registry.OpDef.onnx): an ONNX op name, or
`form(emitter, node, inputs) -> output name(s)` written against the `Emitter` below.
Placeholders become graph inputs (None sizes: symbolic dims), constants and captured
tensors initializers, variables initializers holding their current value, `cond` an `If`,
`while` and `scan` a `Loop`. An op without a form raises UnimplementedError naming it (`NO_FORM` says
why per op). Nothing runs: forms see only static shapes, dtypes and attrs. The same graph
gives the same bytes (names come from node ids and a counter in walk order).

`onnx` is imported only here, and only by `to_onnx` (the optional `[onnx]` extra).
"""
import numpy as np

from defun.runtime import dtypes, errors, sites
from defun.runtime.tensor import ResourceHandle
from defun.runtime.variables import values_as_one_step
from defun.graph.nodes import PLACEHOLDER
from defun.graph.passes import optimize

__all__ = ["to_onnx", "Emitter", "NO_FORM", "import_onnx", "MIN_OPSET"]

MIN_OPSET = 17
# Subgraphs (Loop and If bodies) nested in each other: a model is parsed as one protobuf
# message, and each level nests three messages deeper (node, attribute, graph); protobuf's
# parsers stop at 100, which 31 levels already pass (docs/guide.md).
MAX_SUBGRAPH_NESTING = 30

_COMPLEX_VALUES = "takes or gives complex values, which no ONNX operator computes"
_SERIES = ("a special function (df.math) computed by series, recurrences and continued fractions chosen "
           "per range of the input; ONNX has no such operator and no form is written yet")
# Registered ops without an ONNX form, and why (docs/guide.md lists them; a test checks
# that this table, the registry and the docs agree).
NO_FORM = {
    "assign_variable": "assigns a variable: an ONNX graph has no mutable state",
    "assign_add_variable": "assigns a variable: an ONNX graph has no mutable state",
    "assign_sub_variable": "assigns a variable: an ONNX graph has no mutable state",
    "scatter_add_variable": "assigns a variable: an ONNX graph has no mutable state",
    "scatter_sub_variable": "assigns a variable: an ONNX graph has no mutable state",
    "scatter_update_variable": "assigns a variable: an ONNX graph has no mutable state",
    "print": "writes to a stream: ONNX has no output side effects",
    "check_numerics": "raises an error on nan/inf: ONNX cannot raise",
    "assert": "raises an error when its condition is false: ONNX cannot raise",
    "stateless_random_normal": "ONNX's random ops are not seed-compatible with df's counter-based generator",
    "stateless_random_uniform": "ONNX's random ops are not seed-compatible with df's counter-based generator",
    "dropout": "draws its mask from df's counter-based generator (no seed-compatible ONNX op)",
    "svd": "ONNX has no singular value decomposition (an iterative one would not give LAPACK's signs, "
           "which df's results carry)",
    "eigh": "ONNX has no eigendecomposition (an iterative one would not give LAPACK's eigenvector "
            "signs, which df's results carry)",
    "complex": _COMPLEX_VALUES,
    "real": _COMPLEX_VALUES,
    "imag": _COMPLEX_VALUES,
    "conj": _COMPLEX_VALUES,
    "angle": _COMPLEX_VALUES,
    "fft": _COMPLEX_VALUES,
    "rfft": _COMPLEX_VALUES,
    "irfft": _COMPLEX_VALUES,
    "lgamma": _SERIES,
    "digamma": _SERIES,
    "polygamma": _SERIES,
    "erfc": "ONNX's Erf gives 1 - erf(x), which rounds to 0 where erfc is what is asked for (x > 4)",
    "erfinv": _SERIES,
    "igamma": _SERIES,
    "igammac": _SERIES,
    "betainc": _SERIES,
    "bessel_i0e": _SERIES,
    "bessel_i1e": _SERIES,
}


def import_onnx():
    """The `onnx` module, or an ImportError naming the `[onnx]` extra."""
    try:
        import onnx  # lazily: the optional [onnx] extra, never needed by the core
        from onnx import helper, numpy_helper  # noqa: F401
    except ImportError as e:
        raise ImportError("df.export_onnx needs the `onnx` package: pip install 'defun[onnx]' "
                          "(onnx, and onnxruntime to run the model)") from e
    return onnx


def _unimplemented(node, why):
    site = sites.format_site(node.site) if node.site is not None else None
    where = f" (traced at {site})" if site else ""
    return errors.UnimplementedError(
        f"export_onnx: op {node.op.name!r}{where} has no ONNX form: {why}. Keep it out of the "
        f"exported function (export a function computing only what ONNX can express)")


# The small integers onnxruntime has few kernels for (no int8 MatMul or ReduceSum, no
# unsigned Neg, ...): a node computing them runs in int32 (uint32: int64) and casts its
# results back. Casts wrap, so the results are numpy's wrapped ones. uint64 has no wider
# type: only casts and identities of it export.
_WIDER = {"int8": dtypes.int32, "int16": dtypes.int32, "uint8": dtypes.int32, "uint16": dtypes.int32,
          "uint32": dtypes.int64}
_UINT64_OPS = frozenset(("const", "cast", "identity", "stop_gradient"))


class _TypeView:
    """A tensor's static shape and (widened) dtype, as a form reads them."""

    __slots__ = ("shape", "dtype")

    def __init__(self, t):
        self.shape = t.shape
        self.dtype = _WIDER.get(t.dtype.name, t.dtype)


class _WidenedNode:
    """`node` as its form sees it when its small integers are computed widened."""

    def __init__(self, node):
        self._node = node
        self.inputs = [_TypeView(t) for t in node.inputs]
        self.outputs = [_TypeView(t) for t in node.outputs]

    def __getattr__(self, name):
        return getattr(self._node, name)


def _small_ints(node):
    """The small-integer dtypes among a node's inputs and outputs (a set of names)."""
    return {t.dtype.name for t in (*node.inputs, *node.outputs)} & {*_WIDER, "uint64"}


class _Var:
    """A resource tensor while exporting: the variable store it points at."""

    __slots__ = ("store",)

    def __init__(self, store):
        self.store = store


class Emitter:
    """What an op's ONNX form writes with. Values are names (str); `""` is an absent input.

    op(type, *inputs, n=1, **attrs) -> name (n == 1) or list of n names
    const(array) -> name of an initializer; ints([...]) int64 vector; scalar(v, dtype)
    onnx_type(dtype) -> the TensorProto element type of a df DType; cast(x, dtype)
    reduce(type, x, axes, keepdims) with axes None for all (the opset decides attr or input)
    where(cond, x, y, dtype): Where for every dtype
    unsqueeze / squeeze(x, axes); shape(x, static) -> int64 vector (a constant when static)
    dim(x, axis) -> int64 [size of axis]; variable(handle) -> the variable's initializer
    inline(graph, inputs) -> outputs; subgraph(input types, build, output types) -> GraphProto
    """

    def __init__(self, onnx, opset):
        self._onnx = onnx
        self._helper = onnx.helper
        self._np_helper = onnx.numpy_helper
        self.opset = opset
        self._scopes = [[]]          # node lists: the main graph, then open subgraphs
        self.initializers = []
        self._consts = {}            # (dtype, shape, bytes) -> initializer name
        self._variables = {}         # id(store) -> initializer name
        self.variable_values = {}    # id(store) -> its array, the captured ones read as one step
        self._taken = set()
        self._optimized = {}         # id(graph) -> (graph, optimized)
        self._active = []            # graphs being inlined (a recursive call cannot be)

    # ------------------------------------------------------------------ names and types
    def fresh(self, base):
        """A name no other value of the model has (deterministic: first come, first served)."""
        name, k = base, 0
        while name in self._taken:
            k += 1
            name = f"{base}_{k}"
        self._taken.add(name)
        return name

    def onnx_type(self, dtype):
        tp = self._onnx.TensorProto
        name = dtypes.as_dtype(dtype).name
        if name.startswith("complex"):
            # ONNX declares complex tensor types, but its operators (and onnxruntime's kernels)
            # take none: a complex value inside a model could not be computed.
            raise errors.UnimplementedError(
                f"export_onnx: dtype {name} is not supported by ONNX operators; keep complex values "
                f"(df.complex, df.signal, ...) out of the function you export, or use export_json / "
                f"export_numpy_source")
        try:
            return {"float16": tp.FLOAT16, "float32": tp.FLOAT, "float64": tp.DOUBLE,
                    "int8": tp.INT8, "int16": tp.INT16, "uint8": tp.UINT8, "uint16": tp.UINT16,
                    "uint32": tp.UINT32, "uint64": tp.UINT64,
                    "int32": tp.INT32, "int64": tp.INT64, "bool": tp.BOOL}[name]
        except KeyError:
            raise errors.UnimplementedError(f"export_onnx: dtype {dtype} has no ONNX type") from None

    def value_info(self, name, shape, dtype, dim_prefix=None):
        dims = [d if d is not None else (f"{dim_prefix}_{k}" if dim_prefix else None)
                for k, d in enumerate(shape)]
        return self._helper.make_tensor_value_info(name, self.onnx_type(dtype), dims)

    # ------------------------------------------------------------------ nodes
    def op(self, op_type, *inputs, n=1, **attrs):
        outs = [self.fresh(f"{op_type}_{len(self._taken)}") for _ in range(n)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        if op_type == "Reshape":
            attrs.setdefault("allowzero", 1)   # a 0 in a shape is a size, as numpy's, not "copy"
        self._scopes[-1].append(self._helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0] if n == 1 else outs

    def const(self, value, dtype=None):
        arr = np.asarray(value, dtype=None if dtype is None else dtypes.as_dtype(dtype).np)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        name = self._consts.get(key)
        if name is None:
            name = self._consts[key] = self.fresh(f"const_{len(self._consts)}")
            self.initializers.append(self._np_helper.from_array(np.array(arr, order="C"), name))
        return name

    def ints(self, values):
        return self.const(np.asarray(list(values), np.int64).reshape(-1))

    def scalar(self, value, dtype):
        return self.const(np.asarray(value, dtypes.as_dtype(dtype).np))

    def cast(self, x, dtype):
        return self.op("Cast", x, to=self.onnx_type(dtype))

    def where(self, cond, x, y, dtype):
        """Where(cond, x, y) of `dtype` (onnxruntime has no bool Where: through int32)."""
        if dtypes.as_dtype(dtype) is not dtypes.bool:
            return self.op("Where", cond, x, y)
        ints = self.op("Where", cond, self.cast(x, dtypes.int32), self.cast(y, dtypes.int32))
        return self.cast(ints, dtypes.bool)

    def reduce(self, op_type, x, axes, keepdims):
        """ONNX reduction `op_type` of `x` over `axes` (None: all; () reduces nothing)."""
        keep = int(bool(keepdims))
        if axes is not None and len(axes) == 0:
            return self.op("Identity", x)
        if op_type == "ReduceSum" or self.opset >= 18:
            if axes is None:
                return self.op(op_type, x, keepdims=keep)
            return self.op(op_type, x, self.ints(axes), keepdims=keep)
        return self.op(op_type, x, keepdims=keep, axes=None if axes is None else list(axes))

    def unsqueeze(self, x, axes):
        return self.op("Unsqueeze", x, self.ints(axes)) if len(axes) else x

    def squeeze(self, x, axes):
        return self.op("Squeeze", x, self.ints(axes)) if len(axes) else x

    def shape(self, x, static):
        """The shape of `x` as an int64 vector: a constant when `static` has no None."""
        if None not in tuple(static):
            return self.ints(static)
        return self.op("Shape", x)

    def dim(self, x, axis, static=None):
        """[size of `axis` of x] as an int64 vector of one element."""
        if static is not None and static[axis] is not None:
            return self.ints([static[axis]])
        return self.op("Shape", x, start=axis, end=axis + 1 if axis != -1 else None)

    def variable(self, handle):
        """The initializer holding the current value of the variable `handle` points at."""
        if not isinstance(handle, _Var):
            raise errors.UnimplementedError("export_onnx: read_variable of a handle that is not a "
                                            "captured variable")
        store = handle.store
        name = self._variables.get(id(store))
        if name is None:
            name = self._variables[id(store)] = self.fresh(_sanitize(store.name) or "variable")
            value = self.variable_values.get(id(store), store.value)
            self.initializers.append(self._np_helper.from_array(np.array(value, order="C"), name))
        return name

    # ------------------------------------------------------------------ functions
    def optimized(self, graph):
        hit = self._optimized.get(id(graph))
        if hit is None:
            hit = self._optimized[id(graph)] = (graph, optimize(graph))   # keeps `graph` alive
        return hit[1]

    def inline(self, graph, inputs):
        """Emit function `graph` (optimized) on `inputs` (its all_inputs) in the current
        graph; returns its output names."""
        if any(g is graph for g in self._active):
            raise errors.UnimplementedError(
                f"export_onnx: function @{graph.name} calls itself; ONNX has no recursion")
        g = self.optimized(graph)
        if len(inputs) != len(g.all_inputs):
            raise errors.UnimplementedError(
                f"export_onnx: @{graph.name} takes {len(g.all_inputs)} inputs, got {len(inputs)}")
        env = {id(p): v for p, v in zip(g.all_inputs, inputs)}
        self._active.append(graph)
        try:
            for node in g.nodes:
                if node.op is not PLACEHOLDER:
                    self._emit(node, env)
        finally:
            self._active.pop()
        return [env[id(t)] for t in g.outputs]

    def subgraph(self, input_types, build, output_types, name="body"):
        """A GraphProto with formal inputs of `input_types` [(shape, dtype)], whose outputs are
        `build(input names)` (outer values are visible inside) of `output_types`."""
        if len(self._scopes) > MAX_SUBGRAPH_NESTING:
            raise errors.UnimplementedError(
                f"ONNX export: loops and branches nest more than {MAX_SUBGRAPH_NESTING} deep; "
                f"an ONNX model holds at most {MAX_SUBGRAPH_NESTING} levels of subgraphs (protobuf "
                f"parsers refuse messages nested deeper)")
        ins = [self.fresh(f"{name}_in{k}") for k in range(len(input_types))]
        self._scopes.append([])
        try:
            outs = build(ins)
            final = [self.op("Identity", o) for o in outs]   # fresh names, made in this scope
        finally:
            nodes = self._scopes.pop()
        h = self._helper
        return h.make_graph(nodes, self.fresh(name),
                            [self.value_info(n, s, d) for n, (s, d) in zip(ins, input_types)],
                            [self.value_info(n, s, d) for n, (s, d) in zip(final, output_types)])

    def _emit(self, node, env):
        op = node.op
        form = op.onnx
        if form is None:
            raise _unimplemented(node, NO_FORM.get(op.name, "no ONNX equivalent is declared"))
        inputs = [env[id(t)] for t in node.inputs]
        small = _small_ints(node) if not op.function_attrs else None
        if small:
            if "uint64" in small and op.name not in _UINT64_OPS:
                raise _unimplemented(node, "onnxruntime computes no uint64 values but casts; "
                                           "df.cast them to int64 first")
            inputs = [self.cast(v, _WIDER[t.dtype.name]) if t.dtype.name in _WIDER else v
                      for v, t in zip(inputs, node.inputs)]
            node = _WidenedNode(node)
        if isinstance(form, str):
            if any(isinstance(v, _Var) for v in inputs):
                raise _unimplemented(node, "it takes a variable handle")
            outs = self.op(form, *inputs, n=len(node.outputs), **node.attrs)
        else:
            outs = form(self, node, inputs)
        outs = [outs] if isinstance(outs, (str, _Var)) else list(outs)
        if len(outs) != len(node.outputs):
            raise errors.UnimplementedError(
                f"export_onnx: the ONNX form of {op.name!r} gave {len(outs)} outputs for "
                f"{len(node.outputs)} (a bug in its form)")
        if small:
            node = node._node
            outs = [self.cast(o, t.dtype) if t.dtype.name in _WIDER else o for o, t in zip(outs, node.outputs)]
        for t, name in zip(node.outputs, outs):
            env[id(t)] = name


def _sanitize(name):
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in str(name))


def to_onnx(graph, captured_values, input_names, output_names, opset=MIN_OPSET, doc_string=""):
    """The checked onnx.ModelProto of function `graph`.

    `captured_values` are the values of its capture placeholders (eager tensors become
    initializers, variable handles their variable's current value), `input_names` name its
    arguments and `output_names` its outputs. Raises UnimplementedError naming an op without
    an ONNX form; runs nothing.
    """
    onnx = import_onnx()
    max_opset = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= max_opset:
        raise ValueError(f"export_onnx: opset must be an int from {MIN_OPSET} to {max_opset} "
                         f"(this onnx), got {opset!r}")
    e = Emitter(onnx, opset)
    params = graph.inputs
    if len(input_names) != len(params):
        raise ValueError(f"export_onnx: {len(input_names)} input names for {len(params)} inputs")
    # the output names first: they are kept exactly (an input of the same name is renamed)
    outs = [e.fresh(_sanitize(n) or f"output_{k}") for k, n in enumerate(output_names)]
    names = [e.fresh(_sanitize(n) or f"input_{k}") for k, n in enumerate(input_names)]
    for n, t in zip(input_names, params):
        if t.dtype is dtypes.resource:
            raise TypeError(f"export_onnx: argument {n!r} of {graph.name} is a variable; an exported "
                            f"function takes tensors only. Use the variable from the enclosing scope "
                            f"instead of passing it (captured variables export their current value)")
    feeds = list(names)
    e.variable_values = values_as_one_step(captured_values)    # one step of other threads
    for v in captured_values:
        if isinstance(v, ResourceHandle):
            feeds.append(_Var(v._value))
        else:
            feeds.append(e.const(np.asarray(v._value)))
    results = e.inline(graph, feeds)
    nodes = e._scopes[0]
    for r, name, t in zip(results, outs, graph.outputs):
        if isinstance(r, _Var):
            raise TypeError(f"export_onnx: output {name!r} of {graph.name} is a variable handle; "
                            f"return its value (v.read_value()) instead")
        nodes.append(e._helper.make_node("Identity", [r], [name]))
    h = e._helper
    g = h.make_graph(nodes, _sanitize(graph.base_name) or "main",
                     [e.value_info(n, t.shape, t.dtype, dim_prefix=n) for n, t in zip(names, params)],
                     [e.value_info(n, t.shape, t.dtype, dim_prefix=n) for n, t in zip(outs, graph.outputs)],
                     initializer=e.initializers, doc_string=doc_string or None)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="defun",
                         ir_version=min(onnx.IR_VERSION, 10))
    onnx.checker.check_model(model, full_check=True)
    return model
