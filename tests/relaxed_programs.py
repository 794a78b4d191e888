"""Generated programs for tests/test_relaxed_sweep.py: small functions of ops that move,
broadcast, reduce and combine sizes, with their argument shapes written in size variables
(N, M, K, L), so one program is called at many sizes.

    prog = generate(seed)
    shapes = prog.arg_shapes({"N": 3, "M": 1})      # None: sizes the program refuses
    prog.run(DF_OPS, tensors), prog.run(NP_OPS, arrays)   # every value: arguments, then nodes

A symbolic size is a variable name, an int, or ("add", a, b) (concat), ("mul", a, b)
(reshape -1, tile), ("bc", a, b) (two sizes broadcast: equal, or one of them 1), ("sl", a,
start, stop, step) (a slice's length). A program is a list of nodes, each an op name, the
values it reads (arguments first, then nodes, by position) and its attributes; `describe`
writes it as Python for a failure's reproduction.

    prog = generate(seed, np.float32, "scan+cond")    # with features (FEATURES, PAIRS)
    prog.run(DF_OPS, tensors, state)     # state: the run's variables ({"vars": [...]}), inner defun

A feature is a node kind (for_rows, while, scan, capture, var_read, var_assign), a span of
nodes run inside a wrapper (`Program.span`: nested, cond, ag_if; the wrapper gets the span
as a function of every earlier value), or the whole program under df.vmap
(`Program.batched`, the batch size variable B); see "features a program can use".
"""
import numpy as np

import defun as df

VARS = ("N", "M", "K", "L")


class Invalid(Exception):
    """Sizes a program refuses (a broadcast of two sizes neither 1, a max of nothing, ...)."""


def size_of(d, env):
    """The int symbolic size `d` is for variables `env`; Invalid when it is none."""
    if type(d) is int:
        return d
    if type(d) is str:
        return env[d]
    kind, a, b = d[0], size_of(d[1], env), None if d[0] == "sl" else size_of(d[2], env)
    if kind == "add":
        return a + b
    if kind == "mul":
        return a * b
    if kind == "bc":
        if a != b and 1 not in (a, b):
            raise Invalid(f"{d}: {a} against {b}")
        return b if a == 1 else a
    return len(range(a)[slice(*d[2:])])


def _bc(a, b):
    return a if a == b or b == 1 else b if a == 1 else ("bc", a, b)


class Program:
    """Arguments (float, or int32 indices below a bound) and nodes, with symbolic shapes."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.args = []      # (kind "float" | "index", symbolic shape, bound of an index's values)
        self.nodes = []     # (op, operand positions, attrs)
        self.shapes = []    # symbolic shape of each value: arguments, then nodes
        self.floats = []    # whether each value is a float tensor
        self.span = None    # (first node, node past the last, wrapper): nodes run inside a wrapper
        self.batched = None     # under df.vmap: whether each argument has the batch axis B
        self.var_inits = []     # each df.Variable's first value (scalars, made per run)

    @property
    def variables(self):
        """The size variables the arguments' shapes (and indices' bounds) name, sorted."""
        found = set()

        def walk(d):
            if type(d) is str:
                found.add(d)
            elif type(d) is tuple:
                for e in d[1:]:
                    walk(e)
        for _, shape, bound in self.args:
            for d in shape:
                walk(d)
            walk(bound)
        return sorted(found) + (["B"] if self.batched else [])

    def arg(self, shape, kind="float", bound=None):
        """A new argument (placed before every node: positions of nodes move on by one)."""
        self.args.append((kind, tuple(shape), bound))
        k = len(self.args) - 1
        self.nodes = [(op, [p + 1 if p >= k else p for p in ins], attrs) for op, ins, attrs in self.nodes]
        self.shapes.insert(k, tuple(shape))
        self.floats.insert(k, kind == "float")
        return k

    def add(self, op, ins, attrs, shape, is_float=True):
        self.nodes.append((op, list(ins), attrs))
        self.shapes.append(tuple(shape))
        self.floats.append(is_float)
        return len(self.shapes) - 1

    def sinks(self):
        """Float values no node reads (the program's outputs), arguments included; broadcast_to's
        shape operand counts as unread (its values have no gradient)."""
        read = {p for op, ins, _ in self.nodes for p in (ins[:1] if op == "broadcast_to" else ins)}
        return [k for k in range(len(self.shapes)) if k not in read and self.floats[k]]

    def arg_shapes(self, env):
        """Each argument's shape for variables `env`, or None when a size is refused."""
        try:
            return [((env["B"],) if self.batched and self.batched[k] else ()) + tuple(size_of(d, env) for d in shape)
                    for k, (_, shape, _) in enumerate(self.args)]
        except Invalid:
            return None

    def arrays(self, env, seed):
        """Argument arrays for `env` (Invalid: an index into nothing)."""
        rng = np.random.default_rng(seed)
        shapes, out = self.arg_shapes(env), []
        if shapes is None:
            raise Invalid(f"sizes {env}")
        for (kind, _, bound), shape in zip(self.args, shapes):
            if kind == "float":
                out.append(rng.normal(size=shape).astype(self.dtype))
                continue
            n = size_of(bound, env)
            if n == 0 and np.prod(shape) > 0:
                raise Invalid("an index into a size 0")
            out.append(rng.integers(0, max(n, 1), size=shape).astype(np.int32))
        return out

    def run(self, ops, values, state=None):
        """Every value (arguments, then nodes) of one example; `state`: the run's own variables
        and inner functions (a dict), for nodes that read or assign one and for wrappers."""
        values, (start, stop, wrapper) = list(values), self.span or (None, None, None)
        values += self._nodes(ops, values, 0, start, state)
        if start is not None:
            values += ops["wrap_" + wrapper](lambda *vals: self._nodes(ops, list(vals), start, stop, state),
                                             values, state)
            values += self._nodes(ops, values, stop, None, state)
        return values

    def _nodes(self, ops, values, start, stop, state):
        """The values of nodes start..stop, after `values`."""
        new = []
        for op, ins, attrs in self.nodes[start:stop]:
            args = [(values + new)[p] for p in ins]
            new.append(ops[op](state, *args, **attrs) if op in STATEFUL else ops[op](*args, **attrs))
        return new

    def describe(self):
        """The program as Python (df ops) for a reproduction."""
        names = [f"a{k}" for k in range(len(self.args))] + [f"t{k}" for k in range(len(self.nodes))]
        lines = [f"# a{k}: {kind} {shape}" + (f" values < {bound}" if kind == "index" else "") +
                 (" (batched: B first)" if self.batched and self.batched[k] else "")
                 for k, (kind, shape, bound) in enumerate(self.args)]
        if self.batched:
            lines.append("# under df.vmap over B, in_axes " + str([0 if b else None for b in self.batched]))
        for k, (op, ins, attrs) in enumerate(self.nodes):
            if self.span and k in self.span[:2]:
                lines.append(f"# {'begin' if k == self.span[0] else 'end'} {self.span[2]}")
            extra = "".join(f", {a}={v!r}" for a, v in attrs.items())
            shape = self.shapes[len(self.args) + k]
            lines.append(f"t{k} = {op}({', '.join(names[p] for p in ins)}{extra})   # {shape}")
        if self.span and self.span[1] == len(self.nodes):
            lines.append(f"# end {self.span[2]}")
        lines.append(f"outputs: {[names[p] for p in self.sinks()]}")
        return "\n".join(lines)


# ---------------------------------------------------------------------- the ops, twice
def _np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_reduce(kind):
    def reduce(x, axis, keepdims):
        if kind == "max" and x.size == 0:
            raise Invalid("a max of nothing")
        return getattr(np, kind)(x, axis=axis, keepdims=keepdims)
    return reduce


def _index(axis, sl):
    return (slice(None),) * axis + (slice(*sl),)


DF_OPS = {
    "tanh": df.tanh, "sin": df.sin, "square": df.square, "affine": lambda x: x * 0.5 + 1.0,
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "maximum": df.maximum,
    "sum": lambda x, axis, keepdims: df.reduce_sum(x, axis=axis, keepdims=keepdims),
    "mean": lambda x, axis, keepdims: df.reduce_mean(x, axis=axis, keepdims=keepdims),
    "max": lambda x, axis, keepdims: df.reduce_max(x, axis=axis, keepdims=keepdims),
    "matmul": lambda a, b, transpose_b: df.matmul(a, b, transpose_b=transpose_b),
    "transpose": lambda x, perm: df.transpose(x, perm),
    "reshape": lambda x, shape: df.reshape(x, shape),
    "concat": lambda a, b, axis: df.concat([a, b], axis),
    "stack": lambda a, b, axis: df.stack([a, b], axis=axis),
    "slice": lambda x, axis, sl: x[_index(axis, sl)],
    "gather": lambda p, i, axis: df.gather(p, i, axis=axis),
    "where": lambda x, y: df.where(x > 0.0, x, y),
    "broadcast_to": lambda a, like: df.broadcast_to(a, df.shape(like)),
    "expand_dims": lambda x, axis: df.expand_dims(x, axis),
    "squeeze": lambda x, axis: df.squeeze(x, axis),
    "tile": lambda x, reps: df.tile(x, reps),
    "softmax": lambda x: df.nn.softmax(x),
    "one_hot": lambda i, depth, dtype: df.one_hot(i, depth, dtype=df.as_dtype(dtype)),
}

NP_OPS = {
    "tanh": np.tanh, "sin": np.sin, "square": np.square, "affine": lambda x: x * x.dtype.type(0.5) + x.dtype.type(1),
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "maximum": np.maximum,
    "sum": _np_reduce("sum"), "mean": _np_reduce("mean"), "max": _np_reduce("max"),
    "matmul": lambda a, b, transpose_b: a @ (b.T if transpose_b else b),
    "transpose": lambda x, perm: np.transpose(x, perm), "reshape": lambda x, shape: np.reshape(x, shape),
    "concat": lambda a, b, axis: np.concatenate([a, b], axis),
    "stack": lambda a, b, axis: np.stack([a, b], axis),
    "slice": lambda x, axis, sl: x[_index(axis, sl)],
    "gather": lambda p, i, axis: np.take(p, i, axis=axis),
    "where": lambda x, y: np.where(x > 0, x, y),
    "broadcast_to": lambda a, like: np.broadcast_to(a, like.shape),
    "expand_dims": np.expand_dims, "squeeze": np.squeeze, "tile": np.tile,
    "softmax": _np_softmax,
    "one_hot": lambda i, depth, dtype: np.eye(depth, dtype=dtype)[i],
}


# ---------------------------------------------------------------------- features a program can use
# Node kinds: a loop over rows (AutoGraph `for row in x`), df.while_loop counting to an unknown
# size, df.scan over rows, a captured outer tensor, a df.Variable read and assigned; wrappers
# over a span of nodes (run(): they get the span as a function of every earlier value and give
# its values): a nested defun, df.cond, an AutoGraph `if` on a tensor. A whole program under
# df.vmap is Program.batched (tests/test_relaxed_sweep.py maps it).
STATEFUL = {"var_read", "var_assign"}


def _ag_for_rows(x):
    acc = df.reduce_sum(x, axis=0) * 0.0
    for row in x:       # AutoGraph: a loop node over an unknown number of rows
        acc = acc * 0.5 + df.tanh(row)
    return acc


def _np_for_rows(x):
    acc = np.sum(x, axis=0) * x.dtype.type(0)
    for row in x:
        acc = acc * x.dtype.type(0.5) + np.tanh(row)
    return acc


def _df_while(x):
    n = df.minimum(df.shape(x)[0], 3)
    _, y = df.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, df.tanh(y) * 0.5 + y), [df.constant(0), x])
    return y


def _np_while(x):
    for _ in range(min(x.shape[0], 3)):
        x = np.tanh(x) * x.dtype.type(0.5) + x
    return x


def _np_scan(x):
    acc, out = np.sum(x, axis=0) * x.dtype.type(0), []
    for row in x:
        acc = acc * x.dtype.type(0.5) + np.sin(row)
        out.append(acc)
    return np.stack(out) if out else np.zeros_like(x)


def _df_assign(state, x, var):
    v = state["vars"][var]
    v.assign_add(df.reduce_sum(df.tanh(x)) * 0.01)
    return x + v


def _np_assign(state, x, var):
    v = state["vars"][var]
    state["vars"][var] = np.asarray(v + np.sum(np.tanh(x)) * x.dtype.type(0.01), x.dtype)
    return x + state["vars"][var]


def _ag_if(sub, vals, state):
    if df.reduce_sum(vals[0]) > 0.0:        # AutoGraph: a cond node, both branches traced
        out = list(sub(*vals))
    else:
        out = [t * 0.5 - 1.0 for t in sub(*vals)]
    return out


def _np_if(sub, vals, state):
    out = sub(*vals)
    return out if np.sum(vals[0]) > 0 else [t * t.dtype.type(0.5) - t.dtype.type(1) for t in out]


DF_OPS.update({
    "for_rows": _ag_for_rows, "while": _df_while,
    "scan": lambda x: df.scan(lambda acc, row: acc * 0.5 + df.sin(row), x, initializer=df.reduce_sum(x, axis=0) * 0.0),
    "capture": lambda x, c: x * c + 0.25,
    "var_read": lambda state, x, var: x * state["vars"][var], "var_assign": _df_assign,
    "wrap_nested": lambda sub, vals, state: list(state.setdefault("inner", df.defun(sub))(*vals)),
    "wrap_cond": lambda sub, vals, state: list(df.cond(df.reduce_sum(vals[0]) > 0.0, lambda: list(sub(*vals)),
                                                       lambda: [t * 0.5 - 1.0 for t in sub(*vals)])),
    "wrap_ag_if": _ag_if,
})

NP_OPS.update({
    "for_rows": _np_for_rows, "while": _np_while, "scan": _np_scan,
    "capture": lambda x, c: x * c.numpy() + x.dtype.type(0.25),
    "var_read": lambda state, x, var: x * state["vars"][var], "var_assign": _np_assign,
    "wrap_nested": lambda sub, vals, state: sub(*vals), "wrap_cond": _np_if, "wrap_ag_if": _np_if,
})


# ---------------------------------------------------------------------- the generator
class _Gen:
    def __init__(self, rng, dtype, n_vars):
        self.rng, self.p = rng, Program(dtype)
        self.vars = list(VARS[:n_vars])

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def new_size(self):
        """A size for a new argument's axis: a variable (maybe one already used: sizes equal
        by the program, or equal by coincidence at a call) or a known size."""
        unused = [v for v in self.vars if v not in self.p.variables]
        return self.pick(unused) if unused and self.rng.random() < 0.5 else self.pick(self.vars * 3 + [2, 3])

    def current(self):
        """A float value to build on: usually the newest."""
        floats = [k for k, f in enumerate(self.p.floats) if f]
        return floats[-1] if self.rng.random() < 0.6 else self.pick(floats)

    def fresh_like(self, shape):
        """A new argument broadcasting against `shape`: axes kept, made 1, a variable (1
        broadcast against n when a call makes one of them 1), or leading axes dropped."""
        out = []
        for d in shape:
            r = self.rng.random()
            others = [v for v in self.vars if v != d] or self.vars
            out.append(1 if r < 0.2 else self.pick(others) if r < 0.45 and type(d) is str or
                       r < 0.3 and type(d) is int else d)
        if out and self.rng.random() < 0.25:
            out = out[int(self.rng.integers(1, len(out) + 1)):]
        return self.p.arg(out)


def _unary(g, x):
    return g.p.add(g.pick(["tanh", "sin", "square", "affine"]), [x], {}, g.p.shapes[x])


def _binary(g, x):
    shape = g.p.shapes[x]
    if g.rng.random() < 0.3:      # two values the program made, of one rank
        partners = [k for k, s in enumerate(g.p.shapes) if g.p.floats[k] and k != x and len(s) == len(shape) and
                    all(a == b or 1 in (a, b) or (type(a) is str and type(b) is str) for a, b in zip(s, shape))]
        if partners:
            y = g.pick(partners)
            out = tuple(_bc(a, b) for a, b in zip(shape, g.p.shapes[y]))
            return g.p.add(g.pick(["add", "multiply", "subtract"]), [x, y], {}, out)
    y = g.fresh_like(shape)
    ys = g.p.shapes[y]
    x += x >= y
    pad = (1,) * (len(shape) - len(ys)) + ys
    out = tuple(_bc(a, b) for a, b in zip(shape, pad))
    ins = [x, y] if g.rng.random() < 0.5 else [y, x]
    return g.p.add(g.pick(["add", "subtract", "multiply", "maximum"]), ins, {}, out)


def _reduce(g, x):
    shape = g.p.shapes[x]
    if not shape:
        return None
    r = len(shape)
    axes = None
    if g.rng.random() >= 0.2:
        axes = tuple(sorted({int(a) for a in g.rng.integers(0, r, size=g.rng.integers(1, r + 1))}))
    keep = bool(g.rng.random() < 0.4)
    kept = range(r) if axes is None else axes
    out = tuple(1 if k in kept else d for k, d in enumerate(shape)) if keep else \
        tuple(d for k, d in enumerate(shape) if k not in kept)
    kind = g.pick(["sum", "sum", "mean", "mean", "max"])
    return g.p.add(kind, [x], {"axis": axes, "keepdims": keep}, out)


def _center(g, x):
    """x minus its mean (or sum) over an axis, kept: a reduction broadcast back."""
    shape = g.p.shapes[x]
    if not shape:
        return None
    axis = int(g.rng.integers(len(shape)))
    m = g.p.add(g.pick(["mean", "sum"]), [x], {"axis": axis, "keepdims": True},
                tuple(1 if k == axis else d for k, d in enumerate(shape)))
    return g.p.add(g.pick(["subtract", "multiply"]), [x, m], {}, shape)


def _matmul(g, x):
    shape = g.p.shapes[x]
    if len(shape) != 2:
        return None
    c = g.new_size()
    tb = bool(g.rng.random() < 0.3)
    w = g.p.arg((c, shape[1]) if tb else (shape[1], c))
    x += x >= w
    return g.p.add("matmul", [x, w], {"transpose_b": tb}, (shape[0], c))


def _transpose(g, x):
    shape = g.p.shapes[x]
    if len(shape) < 2:
        return None
    perm = [int(k) for k in g.rng.permutation(len(shape))]
    return g.p.add("transpose", [x], {"perm": perm}, tuple(shape[k] for k in perm))


def _reshape(g, x):
    shape = g.p.shapes[x]
    if len(shape) == 1:
        return g.p.add("reshape", [x], {"shape": [-1, 1]}, (shape[0], 1))
    if len(shape) >= 2 and type(shape[-1]) is int and g.rng.random() < 0.5:
        lead = shape[0]
        for d in shape[1:-1]:
            lead = ("mul", lead, d)
        return g.p.add("reshape", [x], {"shape": [-1, shape[-1]]}, (lead, shape[-1]))
    flat = shape[0] if shape else 1
    for d in shape[1:]:
        flat = ("mul", flat, d)
    return g.p.add("reshape", [x], {"shape": [-1]}, (flat,))


def _concat(g, x):
    shape = g.p.shapes[x]
    if not shape:
        return None
    axis = int(g.rng.integers(len(shape)))
    partners = [k for k, s in enumerate(g.p.shapes) if g.p.floats[k] and len(s) == len(shape) and
                all(a == b for j, (a, b) in enumerate(zip(s, shape)) if j != axis)]
    if g.rng.random() < 0.5 and partners:
        y = g.pick(partners)
    else:
        y = g.p.arg(tuple(g.new_size() if j == axis else d for j, d in enumerate(shape)))
        x += x >= y
    out = tuple(("add", d, g.p.shapes[y][axis]) if j == axis else d for j, d in enumerate(shape))
    ins = [x, y] if g.rng.random() < 0.5 else [y, x]
    return g.p.add("concat", ins, {"axis": axis}, out)


def _stack(g, x):
    shape = g.p.shapes[x]
    partners = [k for k, s in enumerate(g.p.shapes) if g.p.floats[k] and s == shape]
    if g.rng.random() < 0.5:
        y = g.pick(partners)
    else:
        y = g.p.arg(shape)
        x += x >= y
    axis = int(g.rng.integers(len(shape) + 1))
    return g.p.add("stack", [x, y], {"axis": axis}, shape[:axis] + (2,) + shape[axis:])


def _slice(g, x):
    shape = g.p.shapes[x]
    if not shape:
        return None
    axis = int(g.rng.integers(len(shape)))
    sl = g.pick([(1, None, None), (None, -1, None), (None, None, 2), (None, 2, None), (1, 3, None), (None, None, -1)])
    return g.p.add("slice", [x], {"axis": axis, "sl": sl},
                   tuple(("sl", d) + sl if j == axis else d for j, d in enumerate(shape)))


def _gather(g, x):
    shape = g.p.shapes[x]
    if not shape:
        return None
    axis = int(g.rng.integers(len(shape)))
    n = g.new_size()
    i = g.p.arg((n,), "index", shape[axis])
    x += x >= i
    return g.p.add("gather", [x, i], {"axis": axis}, shape[:axis] + (n,) + shape[axis + 1:])


def _where(g, x):
    shape = g.p.shapes[x]
    y = g.fresh_like(shape)
    x += x >= y
    ys = (1,) * (len(shape) - len(g.p.shapes[y])) + g.p.shapes[y]
    return g.p.add("where", [x, y], {}, tuple(_bc(a, b) for a, b in zip(shape, ys)))


def _broadcast_to(g, x):
    shape = g.p.shapes[x]
    a = g.p.arg(tuple(1 if g.rng.random() < 0.5 else d for d in shape)[int(g.rng.integers(0, len(shape) + 1)):])
    x += x >= a
    return g.p.add("broadcast_to", [a, x], {}, shape)


def _expand_squeeze(g, x):
    shape = g.p.shapes[x]
    ones = [k for k, d in enumerate(shape) if d == 1]
    if ones and g.rng.random() < 0.7:
        k = g.pick(ones)
        return g.p.add("squeeze", [x], {"axis": k}, shape[:k] + shape[k + 1:])
    k = int(g.rng.integers(len(shape) + 1))
    return g.p.add("expand_dims", [x], {"axis": k}, shape[:k] + (1,) + shape[k:])


def _tile(g, x):
    shape = g.p.shapes[x]
    if not shape:
        return None
    reps = [int(g.rng.integers(1, 3)) for _ in shape]
    return g.p.add("tile", [x], {"reps": reps}, tuple(d if r == 1 else ("mul", d, r) for d, r in zip(shape, reps)))


def _softmax(g, x):
    return g.p.add("softmax", [x], {}, g.p.shapes[x]) if g.p.shapes[x] else None


def _one_hot(g, x):
    n, depth = g.new_size(), int(g.rng.integers(2, 5))
    i = g.p.arg((n,), "index", depth)
    h = g.p.add("one_hot", [i], {"depth": depth, "dtype": np.dtype(g.p.dtype).name}, (n, depth))
    return _binary(g, h) if g.rng.random() < 0.5 else h


STEPS = [_unary, _binary, _binary, _binary, _binary, _reduce, _reduce, _center, _matmul, _transpose, _reshape,
         _concat, _stack, _slice, _gather, _where, _broadcast_to, _expand_squeeze, _tile, _softmax, _one_hot]


def generate(seed, dtype=np.float64, feature=None):
    """A program of 2-5 steps on 1-4 size variables, from `seed`, with `feature` (one of
    FEATURES) in it."""
    rng = np.random.default_rng(seed)
    g = _Gen(rng, dtype, int(rng.integers(2, 5)) if rng.random() < 0.9 else 1)
    rank = int(rng.integers(1, 4))
    g.p.arg(tuple(g.vars[k] if k == 0 or k < len(g.vars) and rng.random() < 0.7 else g.pick([2, 3] + g.vars)
                  for k in range(rank)))
    for _ in range(int(rng.integers(2, 6))):
        for _ in range(5):      # a step that does not fit the value: another
            if g.pick(STEPS)(g, g.current()) is not None:
                break
        if max((len(s) for s in g.p.shapes[len(g.p.args):]), default=0) > 4:
            break
    if not g.p.nodes:
        _unary(g, 0)
    if feature is not None:
        _feature(g, feature)
    return g.p


def _rows(g, x, op, drop=False):
    shape = g.p.shapes[x]
    return g.p.add(op, [x], {}, shape[1:] if drop else shape) if shape else None


def _capture(g, x):
    shape = g.p.shapes[x]
    cs = (shape[-1],) if shape and type(shape[-1]) is int else (1,) * min(len(shape), 2)
    c = df.constant(g.rng.normal(size=cs).astype(g.p.dtype))      # made outside every trace: captured
    return g.p.add("capture", [x], {"c": c}, shape)


def _variable(g, x, op):
    g.p.var_inits.append(float(g.rng.normal()))
    return g.p.add(op, [x], {"var": len(g.p.var_inits) - 1}, g.p.shapes[x])


NODE_FEATURES = {"for_rows": lambda g, x: _rows(g, x, "for_rows", True), "while": lambda g, x: _rows(g, x, "while"),
                 "scan": lambda g, x: _rows(g, x, "scan"), "capture": _capture,
                 "var_read": lambda g, x: _variable(g, x, "var_read"),
                 "var_assign": lambda g, x: _variable(g, x, "var_assign")}
FEATURES = [*NODE_FEATURES, "nested", "cond", "ag_if", "vmap"]
# two at once (an assignment under df.vmap is refused: not paired)
PAIRS = ["while+vmap", "scan+vmap", "for_rows+vmap", "cond+vmap", "ag_if+vmap", "var_read+vmap", "capture+vmap",
         "capture+nested", "scan+nested", "while+cond", "for_rows+ag_if", "var_assign+nested", "var_assign+cond",
         "var_assign+ag_if", "scan+cond", "nested+vmap"]


def _feature(g, feature):
    """Puts `feature` into the program: a node kind on a value, then maybe another step; a
    span of nodes wrapped; or every argument batched (some not) under df.vmap. "scan+cond":
    both (node kinds first: a span or vmap may hold them)."""
    if "+" in feature:
        for f in sorted(feature.split("+"), key=lambda f: f not in NODE_FEATURES):
            _feature(g, f)
    elif feature == "vmap":
        g.p.batched = [True] + [bool(g.rng.random() < 0.7) for _ in g.p.args[1:]]
    elif feature in NODE_FEATURES:
        for _ in range(5):
            if NODE_FEATURES[feature](g, g.current()) is not None:
                break
        else:
            NODE_FEATURES[feature](g, 0)    # the first argument: never a scalar
        if g.rng.random() < 0.5:
            for _ in range(5):
                if g.pick(STEPS)(g, g.current()) is not None:
                    break
    else:
        n = len(g.p.nodes)      # (holding a node kind of the program's, if it has one)
        inside = next((k for k, (op, _, _) in enumerate(g.p.nodes) if op in NODE_FEATURES), None)
        start = int(g.rng.integers(n if inside is None else inside + 1))
        g.p.span = (start, int(g.rng.integers(max(start, inside or 0) + 1, n + 1)), feature)
