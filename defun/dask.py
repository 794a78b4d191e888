"""`df.dask`: run graph functions where the data is, on dask arrays and dask clusters.

    y = df.dask.map_blocks(predict, x)                   # lazy dask array, one task per block
    total, grads = df.dask.value_and_gradients(loss_sum, model.variables, x, labels)

What travels to the workers is a JSON graph document (`df.export_json`), never pickled
user code: a task names a function of this module, the document's SHA-256 and the
document itself (its text, or for a document larger than `SCATTER_BYTES`, a future of it
scattered once to the cluster). Each process builds a function from a document once
(`df.load_json`) and caches it by that hash (`build_counts()` says how often it built).
Documents are validated on the client first, so a bad one raises `GraphFormatError`
there, not on every worker.

Blocks are taken along axis 0: every array has the same number of rows and the same
axis-0 chunks (others are rechunked to match the first array's), and is whole along its
other axes (rechunked if not). Needs the optional extra `[dask]`; this module imports
without it and raises ImportError naming the extra when used.
"""
import hashlib
import json
import math
import operator
import threading
import weakref

import numpy as np

from defun.runtime import dtypes, errors
from defun.runtime.backprop import GradientTape
from defun.runtime.ops.array_ops import zeros_like
from defun.runtime.tensor import EagerTensor, constant, convert_to_tensor
from defun.runtime.variables import _BY_HANDLE, Variable
from defun.graph.analysis import assigns_variables
from defun.graph.functionalize import replay_reading
from defun.graph.serialize.loaded import pack_outputs
from defun.export import export_json, load_json
from defun.function import ConcreteFunction, Function, TensorSpec, defun

__all__ = ["map_blocks", "value_and_gradients", "build_counts", "SCATTER_BYTES", "SPLIT_EVERY"]

SCATTER_BYTES = 1 << 16
"""A document longer than this (characters of JSON) is scattered to the cluster once instead
of riding along in every task."""
SPLIT_EVERY = 4
"""Partial results added per task of the reduction tree: depth is log(blocks) / log(this)."""
# Functions kept per process (oldest dropped first): one per document in use is enough.
MAX_CACHED = 32


def _dask():
    """The dask package, or an ImportError naming the extra that provides it."""
    try:
        import dask    # the optional [dask] extra
        import dask.array  # noqa: F401
        import dask.delayed  # noqa: F401
        import dask.highlevelgraph  # noqa: F401
    except ImportError as e:
        raise ImportError(f"df.dask needs dask: install the optional extra [dask] "
                          f"(pip install 'defun[dask]', which brings dask[array] and distributed); "
                          f"{e}") from None
    return dask


# ---------------------------------------------------------------------------------------
# Worker side: one function per document hash, built once per process

_FUNCTIONS = {}     # document hash -> function built from it (insertion order = age)
_BUILDS = {}        # document hash -> times this process built it
_LOCK = threading.Lock()


def build_counts():
    """{document hash: how many times this process built a function from it}.

    On a cluster: `client.run(df.dask.build_counts)` gives it per worker.
    """
    with _LOCK:
        return dict(_BUILDS)


def _remember(key, function):
    with _LOCK:
        _store(key, function)


def _store(key, function):
    if key not in _FUNCTIONS:
        while len(_FUNCTIONS) >= MAX_CACHED:
            _FUNCTIONS.pop(next(iter(_FUNCTIONS)))
        _BUILDS[key] = _BUILDS.get(key, 0) + 1
    _FUNCTIONS[key] = function


def _function_for(key, text):
    """The function of document `text` (hash `key`), built on first use in this process."""
    fn = _FUNCTIONS.get(key)
    if fn is None:
        with _LOCK:
            fn = _FUNCTIONS.get(key)
            if fn is None:
                if hashlib.sha256(text.encode("utf-8")).hexdigest() != key:
                    raise errors.GraphFormatError(
                        f"document {key[:12]}: the text received does not have the hash it was "
                        f"sent with (corrupted in transit)")
                fn = load_json(json.loads(text))
                _store(key, fn)
    return fn


def _tensor(block):
    """A block as an eager tensor, without a copy unless its data is misaligned.

    load_json copies numpy arguments; here that is not needed (a dask block is never
    written to, and a compiled plan never writes over its inputs), which saves a copy per
    block. But a block unpickled from a transfer may start at any byte: numpy then takes
    its unaligned loops, which round differently, so the same block would give other bits
    on another worker. An aligned copy keeps results identical wherever a block runs.
    """
    arr = np.asarray(block)
    if not arr.dtype.isnative:      # big-endian: the same values in the machine's order
        return EagerTensor(arr.astype(arr.dtype.newbyteorder("=")))
    return EagerTensor(arr if arr.flags.aligned else arr.copy())


def _flat_outputs(structure, result, out):
    """Fill `out[k]` with output k of a loaded function's structured `result`."""
    (kind, value), = structure.items()
    if kind == "output":
        out[value] = result.numpy()
    elif kind in ("list", "tuple"):
        for s, r in zip(value, result):
            _flat_outputs(s, r, out)
    elif kind == "dict":
        for k, s in value:
            _flat_outputs(s, result[k], out)
    elif kind == "namedtuple":
        for (_, s), r in zip(value["fields"], result):
            _flat_outputs(s, r, out)
    return out


def _run_block(key, text, *blocks):
    """Task: the function of document `key` on one block of each input."""
    fn = _function_for(key, text)
    outs = _flat_outputs(fn.output_structure, fn(*[_tensor(b) for b in blocks]),
                         [None] * len(fn.graph.outputs))
    return outs[0] if len(outs) == 1 else tuple(outs)


def _step_block(key, text, values, *blocks):
    """Task: (loss, gradient per variable) of one block, from the step document `key`."""
    fn = _function_for(key, text)
    outs = fn(*[_tensor(b) for b in blocks], *[_tensor(v) for v in values])
    return tuple(t.numpy() for t in outs)


def _add_parts(parts):
    """Task: the elementwise sum of several (loss, gradients...) tuples."""
    total = list(parts[0])
    for part in parts[1:]:
        for k, value in enumerate(part):
            total[k] = total[k] + value
    return tuple(total)


# ---------------------------------------------------------------------------------------
# Client side: documents, arrays, task graphs

class _Document:
    """A validated graph document as it is shipped: canonical text, its hash, its function."""

    def __init__(self, doc, function):
        self.function = function
        self.text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        self.key = hashlib.sha256(self.text.encode("utf-8")).hexdigest()
        self._futures = {}      # client id -> future of the scattered text
        _remember(self.key, function)   # a threaded scheduler uses this very function

    @classmethod
    def of(cls, f):
        """From a ConcreteFunction, a loaded function, a document dict or a file path."""
        if isinstance(f, ConcreteFunction):
            doc = export_json(f)
            return cls(doc, load_json(doc))
        if hasattr(f, "to_document") and hasattr(f, "signature"):    # a loaded function
            return cls(f.to_document(), f)
        if isinstance(f, dict) or isinstance(f, str) or hasattr(f, "__fspath__"):
            fn = load_json(f)        # validates here: GraphFormatError on the client
            return cls(fn.to_document(), fn)
        raise TypeError(f"expected a df.defun, a ConcreteFunction, a loaded function (df.load_json) "
                        f"or a graph document, got {type(f).__name__}")

    def ref(self, client):
        """What a task receives for the document: its text, or a future of it scattered once."""
        if client is None or len(self.text) <= SCATTER_BYTES:
            return self.text
        future = self._futures.get(client.id)
        if future is None or future.status != "finished":
            future = self._futures[client.id] = client.scatter(self.text, broadcast=True, hash=False)
        return future


def _current_client(client):
    """`client`, else the distributed Client dask would compute on now, else None."""
    if client is not None:
        return client
    try:
        from distributed import Client    # the optional [dask] extra
    except ImportError:
        return None
    owner = getattr(_dask().base.get_scheduler(), "__self__", None)
    return owner if isinstance(owner, Client) else None


def _blocked(arrays, who):
    """The dask arrays aligned for blocks along axis 0 (rechunked where needed)."""
    da = _dask().array
    if not arrays:
        raise TypeError(f"{who}: pass at least one dask array")
    out = []
    for k, a in enumerate(arrays):
        if not isinstance(a, da.Array):
            raise TypeError(f"{who}: array {k} is a {type(a).__name__}, expected a dask array; wrap it "
                            f"with dask.array.from_array(x, chunks=(rows_per_block, ...))")
        if a.ndim == 0:
            raise errors.InvalidArgumentError(
                f"{who}: array {k} is a scalar; blocks are taken along axis 0, so every array needs one")
        if any(len(c) > 1 for c in a.chunks[1:]):       # whole along the other axes
            a = a.rechunk({axis: -1 for axis in range(1, a.ndim)})
        if out:
            first = out[0]
            rows, first_rows = a.shape[0], first.shape[0]
            if not (math.isnan(rows) or math.isnan(first_rows)) and rows != first_rows:
                raise errors.InvalidArgumentError(
                    f"{who}: array {k} has {rows} rows, array 0 has {first_rows}; blocks pair rows, "
                    f"so every array needs the same number")
            if a.chunks[0] != first.chunks[0]:
                if any(math.isnan(c) for c in a.chunks[0] + first.chunks[0]):
                    raise errors.InvalidArgumentError(
                        f"{who}: array {k} and array 0 have different, unknown block sizes along "
                        f"axis 0; call .compute_chunk_sizes() on them first")
                a = a.rechunk({0: first.chunks[0]})
        out.append(a)
    return out


def _spec(rows, a):
    return TensorSpec((None if math.isnan(rows) else int(rows),) + tuple(a.shape[1:]), a.dtype)


def _name(f):
    return getattr(f, "name", None) or type(f).__name__


# ---------------------------------------------------------------------------------------
# map_blocks

def map_blocks(f, *arrays):
    """`f` run lazily on each block (along axis 0) of dask arrays; returns dask arrays.

    >>> predict = df.defun(model.logits)
    >>> x = da.from_array(np.load("big.npy", mmap_mode="r"), chunks=(131072, 64))
    >>> logits = df.dask.map_blocks(predict, x)        # nothing runs yet
    >>> labels = logits.argmax(axis=1).compute()

    `f` is a `df.defun` (traced with a None batch size), a ConcreteFunction, a loaded
    function or a graph document. The result has `f`'s output structure, one dask array
    per output, with dtypes and block shapes from the graph's static inference. Only the
    document travels to the workers.
    """
    dask = _dask()
    from dask.highlevelgraph import HighLevelGraph    # the optional [dask] extra
    arrays = _blocked(arrays, "map_blocks")
    if isinstance(f, Function):
        f = f.get_concrete_function(*[_spec(math.nan, a) for a in arrays])
    document = _Document.of(f)
    fn = document.function
    fname = fn.graph.base_name
    _check_arguments(fn, arrays, fname)
    _check_blockwise(fn, fname)
    n_out = len(fn.graph.outputs)
    rows = arrays[0].chunks[0]
    types = {r: _output_types(fn, [_spec(r, a) for a in arrays]) for r in set(rows)}

    token = dask.base.tokenize(document.key, [a.name for a in arrays])
    name = f"{fname}-{token}"
    ref = document.ref(_current_client(None))
    inputs = [[(a.name, i) + (0,) * (a.ndim - 1) for a in arrays] for i in range(len(rows))]
    # One output: the tasks make the blocks. Several: each task returns a tuple of blocks
    # and a getitem layer per output picks its own.
    run_keys = [(name, i) + ((0,) * (len(fn.graph.outputs[0].shape) - 1) if n_out == 1 else ())
                for i in range(len(rows))]
    run = {key: (_run_block, document.key, ref, *blocks) for key, blocks in zip(run_keys, inputs)}
    graph = HighLevelGraph.from_collections(name, run, dependencies=arrays)
    outputs = []
    for k in range(n_out):
        ndim = len(fn.graph.outputs[k].shape)
        chunks = _output_chunks([types[r][k][0] for r in rows], ndim)
        meta = np.empty((0,) * ndim, types[rows[0]][k][1].as_numpy_dtype)
        if n_out == 1:
            outputs.append(dask.array.Array(graph, name, chunks, meta=meta))
            continue
        out_name = f"{name}-{k}"
        # each output's graph has the shared layers and its own getitem layer (one shared
        # dict would list every output's layer in each graph, some not yet dependencies)
        layers, deps = dict(graph.layers), dict(graph.dependencies)
        layers[out_name] = {(out_name, i) + (0,) * (ndim - 1): (operator.getitem, key, k)
                            for i, key in enumerate(run_keys)}
        deps[out_name] = {name}
        outputs.append(dask.array.Array(HighLevelGraph(layers, deps), out_name, chunks, meta=meta))
    return pack_outputs(fn.output_structure, outputs)


def _check_blockwise(fn, fname):
    """`fn` can run block by block: it assigns no variable, and every output has an axis 0."""
    if any(assigns_variables(n) for n in fn.graph.nodes):
        raise errors.InvalidArgumentError(
            f"map_blocks: {fname} assigns variables; it runs once per block on some worker, where "
            f"an assignment would only change that worker's copy. Map a function without assignments")
    for k, t in enumerate(fn.graph.outputs):
        if len(t.shape) == 0:
            raise errors.InvalidArgumentError(
                f"map_blocks: output {k} of {fname} is a scalar ({t.dtype.name}[]); a blockwise "
                f"output needs the block's axis 0. Return per-row values (shape [None, ...]) and "
                f"reduce the resulting dask array")


def _check_arguments(fn, arrays, fname):
    """Each array fits an argument of `fn` (dtype, rank, sizes; axis 0 per block)."""
    sig = fn.signature
    if len(sig) != len(arrays):
        raise TypeError(f"map_blocks: {fname} takes {len(sig)} arguments "
                        f"({', '.join(s.name for s in sig)}), got {len(arrays)} arrays")
    for k, (a, s) in enumerate(zip(arrays, sig)):
        what = f"map_blocks: array {k} ({s.name})"
        want = f"{s.dtype.name}{list(s.shape)}"
        if np.dtype(a.dtype).newbyteorder("=") != s.dtype.as_numpy_dtype:    # any byte order
            raise errors.InvalidArgumentError(
                f"{what} has dtype {np.dtype(a.dtype).name}, {fname} takes {want}; convert it with "
                f".astype(np.{s.dtype.name})")
        if a.ndim != len(s.shape):
            raise errors.InvalidArgumentError(f"{what} has {a.ndim} dimensions, {fname} takes {want}")
        for axis in range(1, a.ndim):
            if s.shape[axis] is not None and s.shape[axis] != a.shape[axis]:
                raise errors.InvalidArgumentError(
                    f"{what} has shape {list(a.shape)}, {fname} takes {want} (axis {axis} differs)")
        if s.shape[0] is not None and any(r != s.shape[0] for r in a.chunks[0]):
            raise errors.InvalidArgumentError(
                f"{what} has blocks of {sorted(set(a.chunks[0]))} rows, {fname} takes {want}; trace "
                f"it with a None batch size (df.TensorSpec([None, ...])) so one function serves "
                f"every block")


def _output_types(fn, specs):
    """[(shape, dtype)] of `fn`'s outputs for inputs of `specs`, by static inference only."""
    graph = fn.graph

    def infer(*xs):
        return replay_reading(graph, list(xs) + graph.captured_values)
    cf = defun(infer).get_concrete_function(*specs)
    return [(tuple(t.shape), t.dtype) for t in cf.outputs]


def _output_chunks(shapes, ndim):
    """Dask chunks of an output from its shape per block (None: unknown, nan for dask)."""
    nan = float("nan")
    chunks = [tuple(nan if s[0] is None else s[0] for s in shapes)]
    for axis in range(1, ndim):
        sizes = {s[axis] for s in shapes}
        size = sizes.pop() if len(sizes) == 1 else None
        chunks.append((nan if size is None else size,))
    return tuple(chunks)


# ---------------------------------------------------------------------------------------
# value_and_gradients

class _Step:
    """The shipped pure step of (f, block signature, variables): (blocks, values) -> (loss, grads)."""

    __slots__ = ("document", "connected")


_STEPS = weakref.WeakKeyDictionary()    # f -> {(block signature, variable handle ids): _Step}


def value_and_gradients(f, variables, *arrays, client=None):
    """(total loss, [gradient per variable]) of `f` over whole dask arrays, data-parallel.

    >>> @df.defun
    ... def loss_sum(x, labels):            # the SUM of per-example losses of one block
    ...     return df.reduce_sum(df.sparse_softmax_cross_entropy_with_logits(labels, model.logits(x)))
    >>> total, grads = df.dask.value_and_gradients(loss_sum, model.variables, x, labels)
    >>> for g, v in zip(grads, model.variables):
    ...     v.assign_sub(g * (lr / n_rows))

    Each block runs forward and backward on a worker; the partial results are added in a
    tree. Equal to the single-process GradientTape result within float rounding; a
    variable `f` does not read gets None. The first call per (f, block signature) builds
    a pure function of (blocks, variable values) and ships its document once; later calls
    send only the variables' current values. `client=None` computes on the current dask
    scheduler. `f` must read only `variables` and assign none.
    """
    dask = _dask()
    from dask.delayed import Delayed    # the optional [dask] extra
    from dask.highlevelgraph import HighLevelGraph    # the optional [dask] extra
    variables = list(variables)
    if not isinstance(f, Function):
        raise TypeError(f"value_and_gradients: f must be a df.defun (got {type(f).__name__}); "
                        f"decorate the loss with @df.defun")
    for k, v in enumerate(variables):
        if not isinstance(v, Variable):
            raise TypeError(f"value_and_gradients: variables[{k}] is a {type(v).__name__}, expected a df.Variable")
        if any(v is w for w in variables[:k]):
            raise errors.InvalidArgumentError(f"value_and_gradients: variable {v.name!r} is listed twice")
    arrays = _blocked(arrays, "value_and_gradients")
    step = _step_for(f, variables, arrays)
    client = _current_client(client)
    document = step.document
    values = [np.array(v.numpy()) for v in variables]

    token = dask.base.tokenize(document.key, [a.name for a in arrays], values)
    name = f"{_name(f)}-grads-{token}"
    values_key = f"{name}-values"
    dsk = {values_key: (tuple, values)}
    tails = [(0,) * (a.ndim - 1) for a in arrays]
    ref = document.ref(client)
    level = []
    for i in range(len(arrays[0].chunks[0])):
        dsk[(name, 0, i)] = (_step_block, document.key, ref, values_key,
                             *[(a.name, i) + tail for a, tail in zip(arrays, tails)])
        level.append((name, 0, i))
    depth = 0
    while len(level) > SPLIT_EVERY:
        depth += 1
        groups = [level[j:j + SPLIT_EVERY] for j in range(0, len(level), SPLIT_EVERY)]
        for j, group in enumerate(groups):
            dsk[(name, depth, j)] = (_add_parts, group)
        level = [(name, depth, j) for j in range(len(groups))]
    dsk[name] = (_add_parts, level)
    total = Delayed(name, HighLevelGraph.from_collections(name, dsk, dependencies=arrays), layer=name)
    result = client.compute(total, sync=True) if client is not None else total.compute()
    loss, grads = result[0], result[1:]
    return constant(loss), [constant(g) if c else None for g, c in zip(grads, step.connected)]


def _step_for(f, variables, arrays):
    """The cached _Step of (f, block signature, variables), built on first use."""
    key = (tuple((tuple(a.shape[1:]), np.dtype(a.dtype).str) for a in arrays),
           tuple(v.handle._id for v in variables))
    steps = _STEPS.get(f)
    if steps is None:
        steps = _STEPS[f] = {}
    step = steps.get(key)
    if step is None:
        step = steps[key] = _build_step(f, variables, arrays)
    return step


def _build_step(f, variables, arrays):
    """Trace f for blocks, check it is a pure loss of `variables`, ship its pure step."""
    fname = _name(f)
    cf = f.get_concrete_function(*[_spec(math.nan, a) for a in arrays])
    graph = cf.graph
    out = graph.outputs
    if len(out) != 1 or tuple(out[0].shape) != () or not out[0].dtype.is_floating:
        got = ", ".join(f"{t.dtype.name}{list(t.shape)}" for t in out) or "nothing"
        raise errors.InvalidArgumentError(
            f"value_and_gradients: {fname} must return one float scalar, the SUM of the per-example "
            f"losses of its block; it returns {got}")
    if any(assigns_variables(n) for n in graph.nodes):
        raise errors.InvalidArgumentError(
            f"value_and_gradients: {fname} assigns variables; a data-parallel step must be pure. "
            f"Return the loss only and apply the gradients outside (v.assign_sub(lr * g))")
    position = {v.handle._id: k for k, v in enumerate(variables)}
    captured = graph.captured_values
    unlisted = [c for c in captured if c.dtype is dtypes.resource and c._id not in position]
    if unlisted:
        names = [getattr(_BY_HANDLE.get(c._id), "name", "?") for c in unlisted]
        raise errors.InvalidArgumentError(
            f"value_and_gradients: {fname} reads variable(s) {', '.join(map(repr, names))}, which are not "
            f"in `variables`; list every variable it reads (their current values are sent each call)")
    n_args = len(graph.inputs)
    connected = []

    def step(*args):
        blocks, values = args[:n_args], list(args[n_args:])
        feed = list(blocks) + [values[position[c._id]] if c._id in position else c for c in captured]
        with GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(values)
            loss, = replay_reading(graph, feed)
        grads = tape.gradient(loss, values)
        connected[:] = [g is not None for g in grads]
        return (loss,) + tuple(zeros_like(v) if g is None else convert_to_tensor(g)
                               for g, v in zip(grads, values))

    step.__name__ = f"{graph.base_name}_value_and_gradients"
    specs = [_spec(math.nan, a) for a in arrays] + [TensorSpec(v.shape, v.dtype) for v in variables]
    pure = defun(step).get_concrete_function(*specs)
    result = _Step()
    result.document = _Document.of(pure)
    result.connected = tuple(connected)
    return result
