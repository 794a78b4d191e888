"""Backends: what a compiled plan calls for each node, or for a region of several nodes.

The executor (graph/executor.py) asks its backend to `partition` the live nodes of a
graph into steps, each a `Node` or a `Region` (nodes a backend runs as one callable, e.g.
a fused elementwise loop), and then for each node step the callable to bind (`kernel`).
numpy is the first backend; another registers itself with `register_backend` and plugs
in there, without editing ops. Nested calls, cond and while bodies run on the caller's
backend: ops holding functions bind with `op.bind(attrs, backend)`.
"""
import numpy as np

from defun.graph import matmul_layout

__all__ = ["Backend", "NumpyBackend", "Region", "register_backend", "get_backend", "backends",
           "needs_extra", "DEFAULT_BACKEND"]

DEFAULT_BACKEND = "numpy"


class Region:
    """Several nodes run by one callable: `kernel(*inputs) -> tuple of len(outputs)`.

    inputs: the tensors the region reads from outside it, in the kernel's argument order.
    outputs: the tensors of its nodes used after it (by other steps or as graph outputs).
    Regions hold no stateful node (their order and undo logging are the executor's).
    """

    __slots__ = ("nodes", "inputs", "outputs", "kernel", "name")

    def __init__(self, nodes, inputs, outputs, kernel, name="region"):
        self.nodes, self.inputs, self.outputs = list(nodes), list(inputs), list(outputs)
        self.kernel, self.name = kernel, name
        if any(n.stateful for n in self.nodes):
            raise ValueError(f"{name}: a region cannot hold stateful nodes")

    def __repr__(self):
        return f"<Region {self.name}: {len(self.nodes)} nodes>"


class Backend:
    """How plans run nodes. Subclasses set `name` and may override the methods below."""

    name = None

    def partition(self, nodes, outputs):
        """The steps running `nodes` (live nodes in program order) for a plan returning
        `outputs`: each a Node or a Region. Every node is in exactly one step, after the
        steps producing its inputs; a Region lists as outputs every tensor of its nodes that
        a later step or `outputs` uses."""
        return list(nodes)

    def kernel(self, node):
        """(callable, pass_attrs) for one node: the plan calls `fn(*inputs)`, plus the
        node's attrs as keywords when pass_attrs is True."""
        raise NotImplementedError

    def writes_out(self, node, fn):
        """True if `fn` (the node's kernel) takes `out=` and fills a fresh array: the plan
        may then hand it a dead temporary of the same type to write over."""
        return False

    def out_positional(self, node, fn):
        """True if `fn`, which `writes_out`, also takes that array as the positional argument
        after the node's inputs and returns it, as numpy ufuncs do: the plan line is then
        `k3(v1, c2, v1)` instead of `v1 = k3(v1, c2, out=v1)` (two names fewer for
        compile() to read, and no keyword to parse per call)."""
        return False

    def keeps_no_views(self, node):
        """True if the node's kernel keeps no view of its inputs (so an input that only such
        nodes read may be written over once dead)."""
        return False

    def output_check(self, step):
        """A callable the plan calls right after a step (a Node or Region) as
        `check(outputs, inputs)` (tuples of its values), or None (nothing in the plan)."""
        return None


# ufuncs whose positional `out` numpy deprecates (they may take more inputs one day)
_OUT_BY_KEYWORD = frozenset([np.maximum, np.minimum, np.fmax, np.fmin])


class NumpyBackend(Backend):
    """Kernels as registered: `op.bind(attrs)` when the op binds its attrs once, else the
    kernel with the attrs as keywords; numpy ufuncs write over dead temporaries (`out=`)."""

    name = "numpy"

    def kernel(self, node):
        op = node.op
        if op.bind is not None:
            fn = op.bind(node.attrs, self) if op.function_attrs else op.bind(node.attrs)
            if op.name == "matmul":     # the operand layout its shapes run fastest with
                fn = matmul_layout.choose(node, fn)
            return fn, False
        return op.kernel, bool(node.attrs)

    def writes_out(self, node, fn):
        return type(fn) is np.ufunc and fn.nout == 1

    def out_positional(self, node, fn):
        return type(fn) is np.ufunc and fn.nout == 1 and fn.nin == len(node.inputs) and \
            fn not in _OUT_BY_KEYWORD

    def keeps_no_views(self, node):
        op = node.op
        return type(op.kernel) is np.ufunc and op.bind is None and not node.attrs


_BACKENDS = {}
_EXTRAS = {}    # backend name -> the optional extra that installs what it needs


def needs_extra(name, extra):
    """Note that backend `name` is not installed here and comes with extra `extra` (asking
    for it then says so)."""
    _EXTRAS[name] = extra


def register_backend(backend):
    """Install `backend` (a Backend with a unique name); returns it."""
    if not isinstance(backend, Backend) or not backend.name:
        raise TypeError(f"register_backend expects a named Backend, got {backend!r}")
    if backend.name in _BACKENDS:
        raise ValueError(f"a backend named {backend.name!r} is already installed")
    _BACKENDS[backend.name] = backend
    return backend


def get_backend(name=None):
    """The installed backend `name` (default numpy), or `name` itself when it is a Backend;
    ValueError listing the installed ones."""
    if name is None:
        name = DEFAULT_BACKEND
    elif isinstance(name, Backend):
        # an instance is used as given, installed or not (a loaded document runs on one of
        # its own, holding its budgets: graph/serialize/budget.py)
        return name
    backend = _BACKENDS.get(name)
    if backend is None:
        if name in _EXTRAS:
            raise ValueError(f"backend {name!r} is not installed: it needs the optional extra "
                             f"[{_EXTRAS[name]}] (pip install 'defun[{_EXTRAS[name]}]'); installed "
                             f"backends: {', '.join(repr(n) for n in backends())}")
        raise ValueError(f"unknown backend {name!r}; installed backends: "
                         f"{', '.join(repr(n) for n in backends())}")
    return backend


def backends():
    """Names of the installed backends, the default first: ("numpy",), plus "numba" when
    numba is installed (extra [fast])."""
    return tuple(sorted(_BACKENDS, key=lambda n: (n != DEFAULT_BACKEND, n)))


register_backend(NumpyBackend())
