"""A function graph as one Python module that needs only numpy: forward, optionally backward.

    text = module_source(graph, ["x"], backward=(bw, forward_with_side_outputs_view))

Each graph function (the entry, the functions it calls, branch and loop bodies) becomes
one Python function over what its compiled plan runs (the optimized graph's live nodes, in
program order), one line per node:

    def fn0(a0, a1, a2):
        v3 = _matmul_kernel(a0, a1, transpose_a=False, transpose_b=False)
        v4 = np.add(v3, a2)
        return (v4,)

The kernels are the ops' own (graph/numpy_source/writer.py writes them and what they use from their
source), so results equal the plan's bit for bit. A `call` node is a call, a `cond` an
`if`, a `while` a `while` loop kept as the while kernel keeps it, a `scan` a `for` loop
over the rows. Captured tensors are module-level constants; variables are module-level
cells (`VariableStore`) whose values the assignments replace. Names in the module are made
here, never taken from a graph: graph and input names appear only sanitized in docstrings
and as string data.
"""
import inspect
import re

from defun.runtime import errors, registry
from defun.runtime.dtypes import from_numpy
from defun.runtime.ops.resource_ops import VariableStore
from defun.runtime.tensor import ResourceHandle
from defun.runtime.variables import values_as_one_step
from defun.graph.analysis import live_nodes
from defun.graph.arguments import bind_arguments
from defun.graph.while_op import holds_stand_ins
from defun.graph.functions import plan_of
from defun.graph.scan import empty_row_sizes
from defun.graph.input_gradients import DenseGrad
from defun.graph.nodes import CONST, PLACEHOLDER
from defun.graph.printer import type_str
from defun.graph.numpy_source.writer import SourceWriter, numpy_type

__all__ = ["module_source"]

# Names the module's own code uses: never given to a kernel, helper or constant.
_ENTRY_NAMES = ("forward", "forward_with_side_outputs", "backward", "INPUTS", "OUTPUTS",
                "INPUT_NAMES", "OUTPUT_NAMES", "_bind", "_frozen", "_from_hex", "_argument", "_seed",
                "_shape_text", "_stand_ins_shaped")
_WHILE_ATTRS = frozenset(["cond", "body", "maximum_iterations", "history", "saves"])
_SCAN_ATTRS = frozenset(["body", "carries", "sliced", "reverse"])
_BODY = "    "


def _known_attrs(n, where, known):
    """The attrs of loop node `n`, refused unless they are exactly those this writer knows."""
    if set(n.attrs) != known:
        raise errors.UnimplementedError(
            f"numpy source: {where}: a {n.op.name} node with attrs {sorted(n.attrs)} (this "
            f"writer knows {sorted(known)})")
    return n.attrs

# the module's helpers; `_bind` is graph/arguments.py's bind_arguments, its text (one source)
_SUPPORT = '''\
def _frozen(array):
    """A constant: read-only, as the graph's constants are."""
    array.flags.writeable = False
    return array


def _from_hex(dtype, shape, data):
    """An array from its little-endian bytes written in hex."""
    little = np.dtype(dtype).newbyteorder("<")
    return np.frombuffer(bytes.fromhex(data), little).astype(dtype).reshape(shape)


def _shape_text(shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _argument(value, what, dtype, shape):
    """`value` as the graph takes it: an array of `dtype` whose shape fits `shape`."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype != dtype and array.dtype.newbyteorder("=") == np.dtype(dtype):
            array = array.astype(dtype)     # another byte order (big-endian): the same values
        if array.dtype != dtype:
            raise TypeError(f"{what} has dtype {array.dtype.name}, expected "
                            f"{np.dtype(dtype).name}; convert it with .astype")
    else:
        array = np.asarray(value, dtype)
    if len(array.shape) != len(shape) or any(s is not None and s != d
                                             for s, d in zip(shape, array.shape)):
        raise ValueError(f"{what} has shape {list(array.shape)}, expected "
                         f"{_shape_text(shape)} (? is any size)")
    return array
'''
_SUPPORT += "\n\n" + inspect.getsource(bind_arguments).replace("def bind_arguments(", "def _bind(", 1)

_STAND_INS = '''

def _stand_ins_shaped(rows):
    """A cond's side output kept per iteration: the empty stand-ins of the iterations that
    ran the other branch take the shape of the rest (never read, only stacked)."""
    empty = (0,) * rows[0].ndim if rows else ()
    shapes = {r.shape for r in rows if r.shape != empty}
    if len(shapes) != 1:
        return rows
    shape = shapes.pop()
    return [r if r.shape == shape else np.zeros(shape, r.dtype) for r in rows]
'''

_SEED = '''

def _seed(gradient, k, dtype, shape):
    """The gradient of output `k` (zeros for None, when its shape is known)."""
    if gradient is None:
        if None in shape:
            raise ValueError(f"backward: output {k} has shape {_shape_text(shape)}, unknown "
                             f"until the function runs; pass its gradient instead of None")
        return np.zeros(shape, dtype)
    return _argument(gradient, f"the gradient of output {k}", dtype, shape)
'''


def _sanitize(name):
    """A name fit for a docstring or comment (letters, digits, _ . / - only)."""
    return re.sub(r"[^A-Za-z0-9_./-]", "_", str(name))[:80] or "_"


def _types(tensors):
    return ", ".join(type_str(t.shape, t.dtype) for t in tensors)

# The variables' cell as the kernels see it. The library's VariableStore carries a lock that
# makes each assignment atomic between threads; a module of plain numpy imports nothing
# else, so its cell's lock is a stand-in that does nothing: a program sharing a variable of
# the module between threads guards it itself (the module says so in its header).
_VARIABLE_CLASS = '''\
class VariableStore:
    """A variable: its value (the functions' assignments replace it), shape, dtype, name."""

    __slots__ = ("value", "shape", "dtype", "name")

    class lock:      # the assignments' `with h.lock:` (no threads are coordinated here)
        __enter__ = __exit__ = staticmethod(lambda *exc: None)

    lock = lock()

    def __init__(self, value, name):
        self.value = value
        self.shape = value.shape
        self.dtype = value.dtype
        self.name = name

    def __repr__(self):
        return f"<variable {self.name} {self.dtype}{list(self.shape)}>"
'''


class _ModuleWriter:
    """The graph functions of one module and the values they share (kernels, constants,
    variables)."""

    def __init__(self, variable_values):
        self.src = SourceWriter(reserved=_ENTRY_NAMES)
        self.functions = []   # source blocks of graph functions, in the order written
        self._names = {}      # id(graph) -> its Python function's name
        self._keep = []
        self.stand_ins = False   # a loop keeps a cond's stand-ins: the module needs _stand_ins_shaped
        self.variable_values = variable_values   # id(store) -> its array, read as one step

    # ------------------------------------------------------------------ values
    def captured(self, value, where):
        """The module-level name of a captured value: a constant array, or a variable."""
        if isinstance(value, ResourceHandle):
            store = value._value
            if not isinstance(store, VariableStore):
                raise errors.UnimplementedError(f"numpy source: {where} captures a resource "
                                                f"that is not a variable")
            cls = self.src.stand_in(VariableStore, _VARIABLE_CLASS)
            name = self.src.name_of(store)
            if name is None:
                comment = (f"# variable {_sanitize(store.name)}: its value when exported; the "
                           f"functions' assignments replace .value\n")
                value = self.variable_values.get(id(store), store.value)
                name = self.src.instance(store, re.sub(r"\W", "_", _sanitize(store.name)),
                                         f"{cls}({self.src.array_text(value)}, {store.name!r})",
                                         comment)
            return name
        return self.src.ref(value._value, "captured", where)

    # ------------------------------------------------------------------ functions
    def function(self, graph):
        """The name of the Python function running `graph` (written on first use)."""
        name = self._names.get(id(graph))
        if name is not None:
            return name
        name = self._names[id(graph)] = self.src.claim(f"fn{len(self._names)}", "fn")
        self._keep.append(graph)
        plan = plan_of(graph)          # the graph its plan runs: optimized, verified
        g = plan.graph
        body = _FunctionBody(self, g, name)
        self.functions.append(body.text())
        return name


class _FunctionBody:
    """The Python source of one graph function (names: a<k> inputs, v<id> values)."""

    def __init__(self, writer, graph, name):
        self.w, self.graph, self.name = writer, graph, name
        self.where = f"function @{_sanitize(graph.base_name)}"
        self.var = {id(t): f"a{i}" for i, t in enumerate(graph.all_inputs)}
        self.lines = []
        inputs = {id(t.node) for t in graph.all_inputs}
        nodes = [n for n in live_nodes(graph) if id(n) not in inputs]
        # as the plan does, each value is dropped after its last use (peak memory: the
        # fewer arrays alive, the more the allocator reuses instead of faulting in pages)
        last_use = {}
        for pos, node in enumerate(nodes):
            for t in node.inputs:
                last_use[id(t)] = pos
        for t in graph.outputs:
            last_use[id(t)] = None
        for pos, node in enumerate(nodes):
            self.node(node)
            dead = sorted({self.var[id(t)] for t in node.inputs if last_use.get(id(t)) == pos
                           and self.var[id(t)].startswith("v")})
            if dead:
                self.emit(f"del {', '.join(dead)}")

    def text(self):
        g = self.graph
        params = ", ".join(f"a{i}" for i in range(len(g.all_inputs)))
        rets = [self.var[id(t)] for t in g.outputs]
        ret = "(" + ", ".join(rets) + ("," if len(rets) == 1 else "") + ")"
        doc = f'{_BODY}"""@{_sanitize(g.base_name)}: ({_types(g.all_inputs)}) -> ({_types(g.outputs)})"""'
        return "\n".join([f"def {self.name}({params}):", doc] + self.lines + [f"{_BODY}return {ret}"])

    def emit(self, line, depth=1):
        self.lines.append(_BODY * depth + line)

    def args(self, node):
        return [self.var[id(t)] for t in node.inputs]

    def outputs(self, node):
        """The left-hand side naming `node`'s outputs ("" when it has none)."""
        outs = node.outputs
        if not outs:
            return ""
        if node.op.single:
            self.var[id(outs[0])] = f"v{node.id}"
            return f"v{node.id} = "
        names = [f"v{node.id}_{k}" for k in range(len(outs))]
        for t, v in zip(outs, names):
            self.var[id(t)] = v
        return ", ".join(names) + ("," if len(names) == 1 else "") + " = "

    def node(self, n):
        op = n.op
        where = f"op {op.name!r} (node {n.name} of {self.where})"
        if op is PLACEHOLDER:
            raise errors.InvalidArgumentError(f"numpy source: {self.where}: placeholder {n.name} "
                                              f"is not one of its inputs")
        if op is CONST:
            self.var[id(n.outputs[0])] = self.w.src.array(n.attrs["value"], f"c{n.id}")
            return
        if op.function_attrs:
            handler = _CONTROL.get(op.name)
            if handler is None:
                raise errors.UnimplementedError(
                    f"numpy source: {where}: an op running functions has no numpy form here "
                    f"(call, cond, while and scan have)")
            handler(self, n, where)
            return
        src = self.w.src
        kernel = src.ref(op.kernel, op.name, where)
        args = self.args(n)
        for k in sorted(n.attrs):
            value = None if op.attrs.get(k) == "transient" else n.attrs[k]
            args.append(f"{k}={src.ref(value, k, where, inline=True)}")
        self.emit(f"{self.outputs(n)}{kernel}({', '.join(args)})")

    # ------------------------------------------------------------------ control flow
    def call(self, n, where):
        f = self.w.function(n.attrs["f"])
        self.emit(f"{self.outputs(n)}{f}({', '.join(self.args(n))})")

    def cond(self, n, where):
        then_f = self.w.function(n.attrs["then_branch"])
        else_f = self.w.function(n.attrs["else_branch"])
        args = self.args(n)
        lhs = self.outputs(n)
        self.emit(f"if {args[0]}:")
        self.emit(f"{lhs}{then_f}({', '.join(args[1:])})", 2)
        self.emit("else:")
        self.emit(f"{lhs}{else_f}({', '.join(args[1:])})", 2)

    def while_(self, n, where):
        attrs = _known_attrs(n, where, _WHILE_ATTRS)
        body = attrs["body"]
        cond_f, body_f = self.w.function(attrs["cond"]), self.w.function(body)
        saves = attrs["saves"] or 0
        nv = len(body.outputs) - saves
        args = self.args(n)
        loop, consts = args[:nv], args[nv:]
        w, c, h = f"loop{n.id}", f"count{n.id}", f"kept{n.id}"
        extra = "".join(f", {x}" for x in consts)
        history, counted = attrs["history"], attrs["history"] or attrs["saves"] is not None
        # per iteration, kept: the loop variables entering it (history), then what the body
        # saves for the gradient (its outputs past the loop variables), as the kernel stacks them
        kept = (nv if history else 0) + saves
        limit = attrs["maximum_iterations"]
        self.emit(f"# while %{n.id}: loop {body_f} while {cond_f} holds"
                  + (" (keeping values of each iteration)" if kept else ""))
        self.emit(f"{w} = ({', '.join(loop)}{',' if len(loop) == 1 else ''})")
        self.emit(f"{c} = 0")
        if kept:
            self.emit(f"{h} = [{', '.join('[]' for _ in range(kept))}]")
        test = f"{cond_f}(*{w}{extra})[0]"
        self.emit(f"while {test}:" if limit is None else f"while {c} < {int(limit)} and {test}:")
        if history:
            for k in range(nv):
                self.emit(f"{h}[{k}].append({w}[{k}])", 2)
        if saves:
            self.emit(f"out{n.id} = {body_f}(*{w}{extra})", 2)
            self.emit(f"{w} = out{n.id}[:{nv}]", 2)
            first = nv if history else 0
            for j in range(saves):
                self.emit(f"{h}[{first + j}].append(out{n.id}[{nv + j}])", 2)
        else:
            self.emit(f"{w} = {body_f}(*{w}{extra})", 2)
        self.emit(f"{c} += 1", 2)
        names = [f"v{n.id}_{k}" for k in range(len(n.outputs))]
        for t, v in zip(n.outputs, names):
            self.var[id(t)] = v
        self.emit(f"{', '.join(names[:nv])}{',' if nv == 1 else ''} = {w}")
        if counted:
            self.emit(f"{names[nv]} = np.asarray({c}, np.int32)")
            for k in range(kept):
                if history and k < nv:
                    empty = f"np.zeros((0,) + np.shape({w}[{k}]), np.asarray({w}[{k}]).dtype)"
                else:
                    t = body.outputs[nv + k - (nv if history else 0)]
                    shape = (0,) + tuple(d or 0 for d in t.shape)
                    empty = f"np.zeros({shape!r}, {numpy_type(t.dtype.np)})"
                    if holds_stand_ins(t):     # the kernel's rule for a cond's stand-ins
                        self.w.stand_ins = True
                        self.emit(f"{h}[{k}] = _stand_ins_shaped({h}[{k}])")
                self.emit(f"{names[nv + 1 + k]} = np.stack({h}[{k}]) if {h}[{k}] else {empty}")


    def scan(self, n, where):
        attrs = _known_attrs(n, where, _SCAN_ATTRS)
        body = attrs["body"]
        body_f = self.w.function(body)
        nc, m = attrs["carries"], attrs["sliced"]
        args = self.args(n)
        carry, xs, consts = args[:nc], args[nc:nc + m], args[nc + m:]
        c, r, t, k = f"carry{n.id}", f"rows{n.id}", f"t{n.id}", len(body.outputs) - nc
        order = f"range(len{n.id} - 1, -1, -1)" if attrs["reverse"] else f"range(len{n.id})"
        self.emit(f"# scan %{n.id}: {body_f} over the rows of {', '.join(xs)}"
                  + (" from the last" if attrs["reverse"] else ""))
        self.emit(f"len{n.id} = np.shape({xs[0]})[0]")
        for x in xs[1:]:
            self.emit(f"if np.shape({x})[0] != len{n.id}:")
            self.emit("raise ValueError('scan: the sliced inputs must have the same size in dimension 0')", 2)
        self.emit(f"{c} = ({', '.join(carry)}{',' if len(carry) == 1 else ''})")
        self.emit(f"{r} = [[None] * len{n.id} for _ in range({k})]")
        rows = "".join(f", {x}[{t}, ...]" for x in xs)
        extra = "".join(f", {x}" for x in consts)
        self.emit(f"for {t} in {order}:")
        self.emit(f"out{n.id} = {body_f}(*{c}{rows}{extra})", 2)
        self.emit(f"{c} = out{n.id}[:{nc}]", 2)
        for j in range(k):
            self.emit(f"{r}[{j}][{t}] = out{n.id}[{nc + j}]", 2)
        names = [f"v{n.id}_{j}" for j in range(len(n.outputs))]
        for tensor, v in zip(n.outputs, names):
            self.var[id(tensor)] = v
        if nc:
            self.emit(f"{', '.join(names[:nc])}, = {c}")
        sizes = empty_row_sizes(body, nc, m) if any(None in y.shape for y in body.outputs[nc:]) else None
        for j in range(k):
            y = body.outputs[nc + j]
            dims = [f"np.shape({args[d[0]]})[{d[1]}]" if type(d) is tuple else str(d or 0)
                    for d in (sizes[j] if sizes else y.shape)]      # (a relaxed trace's sizes: the kernel's rule)
            empty = f"np.zeros(({', '.join(['0'] + dims)},), {numpy_type(y.dtype.np)})"
            if holds_stand_ins(y):     # the kernel's rule for a cond's stand-ins
                self.w.stand_ins = True
                self.emit(f"{r}[{j}] = _stand_ins_shaped({r}[{j}])")
            self.emit(f"{names[nc + j]} = np.stack({r}[{j}]) if len{n.id} else {empty}")


_CONTROL = {"call": _FunctionBody.call, "cond": _FunctionBody.cond, "while": _FunctionBody.while_,
            "scan": _FunctionBody.scan}


# ---------------------------------------------------------------------------------------
def module_source(graph, input_names, backward=None, output_names=None):
    """The module's text for function `graph` whose argument placeholders are named
    `input_names` (its entry points take them by position or keyword) and its outputs
    `output_names` (default output_k: `OUTPUT_NAMES`); with `backward` = (Backward,
    forward-with-side-outputs view), also `forward_with_side_outputs` and `backward`."""
    if output_names is None:
        output_names = [f"output_{k}" for k in range(len(graph.outputs))]
    where = f"function @{_sanitize(graph.base_name)}"
    for name, t in zip(input_names, graph.inputs):
        if t.dtype.name == "resource":
            raise errors.InvalidArgumentError(
                f"numpy source: argument {_sanitize(name)!r} of {where} is a variable; an "
                f"exported function takes arrays only (capture the variable instead)")
    w = _ModuleWriter(values_as_one_step(graph.captured_values))     # one step of other threads
    n_args = len(graph.inputs)
    captures = [w.captured(v, where) for v in graph.captured_values]
    params = [f"x{i}" for i in range(n_args)]
    bind = f"{_BODY}{', '.join(params)}{',' if len(params) == 1 else ''} = _bind(%r, INPUT_NAMES, args, kwargs)" \
        if params else f"{_BODY}_bind(%r, INPUT_NAMES, args, kwargs)"
    checks = [f"{_BODY}{p} = _argument({p}, {'input ' + repr(name)!r}, {numpy_type(t.dtype.np)}, "
              f"{tuple(t.shape)!r})" for p, name, t in zip(params, input_names, graph.inputs)]
    feed = ", ".join(params + captures)
    entries = ["def forward(*args, **kwargs):",
               f'{_BODY}"""The outputs of @{_sanitize(graph.base_name)}, as a list in OUTPUT_NAMES\' order;',
               f'{_BODY}the arguments by position or by name (INPUT_NAMES)."""',
               bind % "forward()", *checks, f"{_BODY}return list({w.function(graph)}({feed}))"]
    if backward is not None:
        entries += ["", ""] + _backward_entries(w, graph, backward, params,
                                                [bind % "forward_with_side_outputs()"] + checks, captures)
    outputs = graph.outputs
    inputs_doc = "".join(f"\n    {_sanitize(n)}: {type_str(t.shape, t.dtype)}"
                         for n, t in zip(input_names, graph.inputs)) or " none"
    doc = [f'"""@{_sanitize(graph.base_name)} as numpy code, written by defun\'s '
           f'export_numpy_source: it needs only numpy.', "",
           f"    outputs = forward({', '.join(params)})          # a list of arrays, OUTPUT_NAMES' order"]
    if backward is not None:
        doc += ["    outputs, saved = forward_with_side_outputs(...)",
                "    input_gradients = backward(output_gradients, saved)   # None: unconnected"]
    outputs_doc = "".join(f"\n    {_sanitize(n)}: {type_str(t.shape, t.dtype)}"
                          for n, t in zip(output_names, outputs)) or " none"
    doc += ["", f"Inputs:{inputs_doc}", f"Outputs:{outputs_doc}"]
    stores = [v._value for v in graph.captured_values if isinstance(v, ResourceHandle)]
    if stores:
        doc += ["Variables (their values when exported; assignments replace them): " +
                ", ".join(f"{_sanitize(s.name)} {type_str(s.shape, from_numpy(s.dtype))}" for s in stores),
                "(no locks: threads sharing a variable here must take turns themselves)"]
    doc += ['"""']
    imports = ["import numpy as np"] + [f"import {m}" for m in sorted(w.src.imports)]
    signature = [f"INPUTS = {[(str(n), t.dtype.name, tuple(t.shape)) for n, t in zip(input_names, graph.inputs)]!r}",
                 f"OUTPUTS = {[(t.dtype.name, tuple(t.shape)) for t in outputs]!r}",
                 f"INPUT_NAMES = {tuple(str(n) for n in input_names)!r}",
                 f"OUTPUT_NAMES = {tuple(str(n) for n in output_names)!r}"]
    support = _SUPPORT + (_SEED if backward is not None else "") + (_STAND_INS if w.stand_ins else "")
    parts = ["\n".join(doc), "\n".join(imports), "\n".join(signature), support.rstrip("\n"),
             "# " + "-" * 86 + "\n# The ops' kernels and what they use, from this library's source",
             *w.src.blocks,
             "# " + "-" * 86 + "\n# The graph functions: one line per node",
             *w.functions,
             "# " + "-" * 86 + "\n# Entry points", "\n".join(entries)]
    return "\n\n\n".join(p.rstrip("\n") for p in parts) + "\n"


def _backward_entries(w, graph, backward, params, checks, captures):
    bw, fwd = backward
    n_args, n_out = len(params), len(graph.outputs)
    where = f"function @{_sanitize(graph.base_name)}"
    saved_inputs = []          # argument positions the backward reads, in its order
    feed = [f"g[{k}]" for k in bw.grad_outputs]
    n_side = len(bw.side_outputs)
    for kind, v in bw.capture_sources:
        if kind == "side":
            feed.append(f"saved[{v}]")
        elif kind == "input" and v < n_args:
            if v not in saved_inputs:
                saved_inputs.append(v)
            feed.append(f"saved[{n_side + saved_inputs.index(v)}]")
        elif kind == "input":
            feed.append(captures[v - n_args])
        else:
            feed.append(w.captured(v, where))
    fwd_name = w.function(fwd)
    bwd_name = w.function(bw.graph)
    n_saved = n_side + len(saved_inputs)
    seeds = ", ".join(f"_seed(output_gradients[{k}], {k}, {numpy_type(t.dtype.np)}, {tuple(t.shape)!r})"
                      if t.dtype.is_inexact else "None"
                      for k, t in enumerate(graph.outputs))
    results = _input_gradients(w, bw, n_args, where)
    saved_list = " + [" + ", ".join(params[k] for k in saved_inputs) + "]" if saved_inputs else ""
    return [
        "def forward_with_side_outputs(*args, **kwargs):",
        f'{_BODY}"""(outputs, side outputs): the outputs and the {n_saved} values `backward` needs."""',
        *checks,
        f"{_BODY}results = {fwd_name}({', '.join(params + captures)})",
        f"{_BODY}return list(results[:{n_out}]), list(results[{n_out}:]){saved_list}",
        "",
        "",
        "def backward(output_gradients, side_outputs):",
        f'{_BODY}"""One gradient per input (None where an input does not reach a float output),',
        f"{_BODY}given one gradient per output (None: zeros) and forward_with_side_outputs' side",
        f'{_BODY}outputs."""',
        f"{_BODY}if len(output_gradients) != {n_out}:",
        f'{_BODY * 2}raise ValueError(f"backward: expected {n_out} output gradients, got '
        f'{{len(output_gradients)}}")',
        f"{_BODY}saved = list(side_outputs)",
        f"{_BODY}if len(saved) != {n_saved}:",
        f'{_BODY * 2}raise ValueError(f"backward: expected the {n_saved} side outputs of '
        f'forward_with_side_outputs, got {{len(saved)}}")',
        f"{_BODY}g = [{seeds}]",
        f"{_BODY}results = {bwd_name}({', '.join(feed)})",
        f"{_BODY}return [{', '.join(results)}]",
    ]


def _input_gradients(w, bw, n_args, where):
    """The expression of each argument's gradient from the backward's `results`: None, a
    dense result, or sparse slices made dense with the op's own kernel."""
    results = []
    to_dense = None
    for spec in bw.input_grads[:n_args]:
        if spec is None:
            results.append("None")
        elif isinstance(spec, DenseGrad):
            results.append(f"results[{spec.output}]")
        else:
            if to_dense is None:
                to_dense = w.src.ref(registry.get("indexed_slices_to_dense").kernel,
                                     "indexed_slices_to_dense", where)
            results.append(f"{to_dense}(results[{spec.values}], results[{spec.indices}], "
                           f"dense_shape={tuple(spec.dense_shape)!r})")
    return results
