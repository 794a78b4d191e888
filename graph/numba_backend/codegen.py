"""The source of one region's numba function: loops over run-time shapes, no temporaries.

`region_source(stages, where, inputs, outputs)` writes a module defining `region(a0, ...)`
(the arguments: the region's inputs that are not inlined scalar constants) returning the
region's outputs. Each loop stage becomes one loop nest over its shape (sizes static where
the graph knows them, read off the inputs where it does not); inside, each elementwise node
is one scalar assignment, its op's template with the inputs' scalars, converted to the
output dtype; inputs are read with broadcasting (a size-1 axis is read at index 0); values a
later stage or the caller needs are stored. A reduction accumulates in the loop (float32 in
float64, integers in 64 bits) and is finished after it. A call stage calls its op's kernel.

Anything the loops do not cover raises `_Fallback` (an input of another size than the graph
says, an unknown size that broadcasts at run time, an empty max): the region then runs on
numpy (graph/numba_backend/__init__.py), which gives numpy's result or error.
Names here are made here (a0, v3, s3, r3, x3_0, i0, d0_1), never taken from a graph.
"""
import numpy as np

from defun.graph.numba_backend.plan import Call, inlined_constant, reduced_axes
from defun.graph.numba_backend.rolling import Rolled

__all__ = ["region_source", "inlined_constant"]

_IND = "    "
# contract: a * b + c may become one fused multiply-add (more exact, not less); no other
# fast-math licence
_DECORATOR = '@njit(error_model="numpy", fastmath={"contract"})'   # cached by jit.py
# template parts with a vectorizable equal (within float rounding; graph/numba_backend/
# polynomials.py), replaced in this order: sigmoid first, so it is computed in its dtype
_FASTER = {"(np.tanh({0} * 0.5) + 1.0) * 0.5": "_sigmoid({0})", "np.tanh(": "_tanh(",
           "np.exp(": "_exp(", "np.log(": "_log(", "np.log1p(": "_log1p("}


def _np_type(dtype):
    np_dt = dtype.np if hasattr(dtype, "np") else np.dtype(dtype)
    return "np.bool_" if np_dt == np.bool_ else f"np.{np_dt.name}"


def _literal(value, dtype):
    """Python source for one scalar of numpy `dtype` (exact: repr of a float round-trips)."""
    v = np.asarray(value).item()
    if dtype.kind == "f":
        if v != v:
            return "np.nan"
        if v in (float("inf"), float("-inf")):
            return "np.inf" if v > 0 else "-np.inf"
        return repr(float(v))
    return repr(bool(v)) if dtype.kind == "b" else repr(int(v))


def _acc_type(dtype, form):
    kind = dtype.np.kind
    if form.init in ("lowest", "highest") or kind == "b":
        return dtype.np
    return np.dtype({"f": np.float64, "i": np.int64, "u": np.uint64}[kind])


def _init(form, acc):
    if form.init == "lowest":
        return "-np.inf" if acc.kind == "f" else repr(int(np.iinfo(acc).min))
    if form.init == "highest":
        return "np.inf" if acc.kind == "f" else repr(int(np.iinfo(acc).max))
    return form.init


def _expression(n, values):
    """The value of elementwise node `n` from its inputs' scalars (source), in its dtype."""
    template = n.op.fused.template(len(n.inputs))
    for slow, fast in _FASTER.items():
        template = template.replace(slow, fast)
    return f"{_np_type(n.outputs[0].dtype)}({template.format(*values)})"


def _item(array, ix):
    """Source of one element of `array` (a name, or a name indexed by a repetition, `st2_0[5]`)
    at the indices `ix` (a list of source strings)."""
    if not ix:
        return array if array.endswith("]") else f"{array}[()]"
    return f"{array[:-1]}, {', '.join(ix)}]" if array.endswith("]") else f"{array}[{', '.join(ix)}]"


class _Writer:
    def __init__(self, stages, where, inputs, outputs):
        self.stages, self.where, self.outputs = stages, where, outputs
        self.lines, self.header = [], []
        self.arrays, self.scalars = {}, {}     # id(tensor) -> name of its array / scalar
        self.kernels = {}
        self.stacks = {}        # (id(block), slot) -> name of the array its repetitions fill
        self.args = []
        self.used_elsewhere = self._uses()
        checks = []
        for t in inputs:
            if inlined_constant(t):
                self.scalars[id(t)] = f"{_np_type(t.dtype)}({_literal(t.node.attrs['value'], t.dtype.np)})"
                continue
            a = f"a{len(self.args)}"
            self.args.append(a)
            if len(t.shape) == 0:
                self.scalars[id(t)] = f"p{len(self.args) - 1}"
                self.lines.append(f"{_IND}p{len(self.args) - 1} = _s({a})")
            else:
                self.arrays[id(t)] = a
                checks += [f"{a}.shape[{d}] != {s}" for d, s in enumerate(t.shape) if s is not None]
        if checks:      # the graph's static sizes: anything else is numpy's to judge
            self.lines.insert(0, f"{_IND}if {' or '.join(checks)}:\n{_IND * 2}raise _Fallback()")

    def _uses(self):
        """id(tensor) of loop values read outside their own loop (or returned)."""
        out = {id(t) for t in self.outputs}
        for st in self.stages:
            consumers = [st.node] if isinstance(st, Call) else st.nodes if isinstance(st, Rolled) \
                else st.nodes + st.reductions
            for n in consumers:
                for t in n.inputs:
                    w = self.where.get(id(t))
                    if w is not None and w[0] is not st:
                        out.add(id(t))
        return out

    def emit(self, line, depth=1):
        self.lines.append(_IND * depth + line)

    def source(self):
        for k, st in enumerate(self.stages):
            (self.call if isinstance(st, Call) else self.rolled if isinstance(st, Rolled) else self.loop)(k, st)
        rets = []
        for t in self.outputs:
            if id(t) in self.arrays:
                rets.append(self.arrays[id(t)])
            else:               # a scalar: returned as a 0-d array of its dtype
                name = f"o{t.node.id}_{t.index}"
                self.emit(f"{name} = np.empty((), {_np_type(t.dtype)})")
                self.emit(f"{name}[()] = {self.scalars[id(t)]}")
                rets.append(name)
        self.emit(f"return ({', '.join(rets)},)")
        head = ['"""A fused region of a defun graph (generated by graph/numba_backend)."""',
                "import numpy as np",
                "from numba import njit",
                "from defun.graph.numba_backend.jit import Fallback as _Fallback, kernel as _kernel, "
                "scalar as _s",
                "from defun.graph.numba_backend.polynomials import exp as _exp, log as _log, "
                "log1p as _log1p, sigmoid as _sigmoid, tanh as _tanh"] + self.header
        sig = f"def region({', '.join(self.args)}):"
        return "\n".join(head + ["", "", _DECORATOR, sig]
                         + self.lines) + "\n"

    # ----------------------------------------------------------------- call stages
    def call(self, k, st):
        n = st.node
        form = n.op.fused
        expr = form.source(n) if form.source is not None else None
        if expr is not None:        # an array expression (single output)
            name = self.arrays[id(n.outputs[0])] = f"k{n.id}_0"
            self.emit(f"{name} = {expr.format(*[self.arrays[id(t)] for t in n.inputs])}")
            return
        kname = self.kernels.get(n.op.name)
        if kname is None:
            kname = self.kernels[n.op.name] = f"_k{len(self.kernels)}"
            self.header.append(f"{kname} = _kernel({n.op.name!r})")
        args = [self.arrays[id(t)] for t in n.inputs]
        args += [repr(n.attrs.get(a, n.op.defaults.get(a))) for a in form.attrs]
        names = [f"k{n.id}_{j}" for j in range(len(n.outputs))]
        for t, name in zip(n.outputs, names):
            self.arrays[id(t)] = name
        self.emit(f"{', '.join(names)} = {kname}({', '.join(args)})")

    # ----------------------------------------------------------------- rolled blocks
    def rolled(self, k, st):
        """One loop over the repetitions around a loop nest over the (static) shape: carries
        and values read after the block in arrays, the rest scalars of one iteration."""
        dims, count = [str(d) for d in st.shape], st.count
        idx = [f"i{j}" for j in range(len(dims))]
        carries = sorted(st.inits)
        kept = self._kept(st, carries)
        types = [_np_type(n.outputs[0].dtype) for n in st.reps[0]]
        for q in carries:
            self.emit(f"c{k}_{q} = np.empty(({', '.join(dims)},), {types[q]})")
        for q in kept:
            self.emit(f"st{k}_{q} = np.empty(({count}, {', '.join(dims)}), {types[q]})")
        self._nest(dims, [f"c{k}_{q}[{', '.join(idx)}] = {types[q]}({self._at(st.inits[q], idx)})"
                          for q in carries])
        self.emit(f"for m{k} in range({count}):")
        body = [f"w{k}_{q} = c{k}_{q}[{', '.join(idx)}]" for q in carries]
        for q, n in enumerate(st.reps[1]):
            values = []
            for j, c in enumerate(st.classes[q]):
                if c[0] == "same":
                    values.append(f"u{k}_{c[1]}")
                elif c[0] == "carry":
                    values.append(f"w{k}_{c[1]}")
                elif c[0] != "stack":       # one tensor, or a constant, in every repetition
                    values.append(self._at(n.inputs[j], idx))
                else:
                    at = f"{c[3]} + {c[4]} * m{k}" if c[4] != 1 else f"{c[3]} + m{k}"
                    values.append(self._at(n.inputs[j], idx, f"{self.stacks[(id(c[1]), c[2])]}[{at}]"))
            body.append(f"u{k}_{q} = {_expression(n, values)}")
        body += [f"st{k}_{q}[m{k}, {', '.join(idx)}] = u{k}_{q}" for q in kept]
        body += [f"c{k}_{q}[{', '.join(idx)}] = u{k}_{q}" for q in carries]
        self._nest(dims, body, depth=2)
        for q in kept:
            self.stacks[(id(st), q)] = f"st{k}_{q}"
        for m, rep in enumerate(st.reps):
            for q, n in enumerate(rep):
                if id(n.outputs[0]) in self.used_elsewhere:
                    self.arrays[id(n.outputs[0])] = f"st{k}_{q}[{m}]" if q in kept else f"c{k}_{q}"

    def _kept(self, st, carries):
        """The slots whose values are kept per repetition: read after the block, except a
        carry whose last value alone is (its carry array holds it)."""
        kept = []
        for q in range(st.period):
            used = [m for m, rep in enumerate(st.reps) if id(rep[q].outputs[0]) in self.used_elsewhere]
            if used and not (q in carries and used == [st.count - 1]):
                kept.append(q)
        return kept

    def _nest(self, dims, body, depth=1):
        for j, d in enumerate(dims):
            self.emit(f"for i{j} in range({d}):", depth + j)
        for b in body:
            self.emit(b, depth + len(dims))

    def _at(self, t, idx, array=None):
        """Source of the element of `t` (broadcast, aligned right) at the indices `idx` of a
        loop over more axes; `array`: where `t` is, when not in self.arrays."""
        array = array or self.arrays.get(id(t))
        if array is None:
            return self.scalars[id(t)]
        r = len(idx)
        return _item(array, [("0" if s == 1 else idx[jj + r - len(t.shape)]) for jj, s in enumerate(t.shape)])

    # ----------------------------------------------------------------- loop stages
    def _reads(self, st):
        """Tensors the loop reads from outside it, in first-use order."""
        mine, seen, reads = set(), set(), []
        for n in st.nodes + st.reductions:
            for t in n.inputs:
                if id(t) not in mine and id(t) not in seen:
                    seen.add(id(t))
                    reads.append(t)
            if n in st.nodes:
                mine.add(id(n.outputs[0]))
        return reads

    def _dims(self, k, st, reads):
        """Names of the loop's sizes, with the run-time checks of what it reads."""
        shape, r = st.shape, len(st.shape)
        dims, sources = [], {}
        for j, size in enumerate(shape):
            if size is not None:
                dims.append(str(size))
                continue
            name = f"d{k}_{j}"
            sources[j] = next(f"{self.arrays[id(t)]}.shape[{j - r + len(t.shape)}]" for t in reads
                              if id(t) in self.arrays and len(t.shape) >= r - j
                              and t.shape[j - r + len(t.shape)] is None)
            self.emit(f"{name} = {sources[j]}")
            dims.append(name)
        checks = []
        for t in reads:
            if id(t) not in self.arrays:
                continue
            for jj, s in enumerate(t.shape):
                j = jj + r - len(t.shape)
                got = f"{self.arrays[id(t)]}.shape[{jj}]"
                if s != 1 and (shape[j] is None and got != sources[j] or shape[j] is not None and s is None):
                    checks.append(f"{got} != {dims[j]}")
        if checks:      # an unknown size that broadcasts (is 1) here, or differs: numpy's case
            self.emit(f"if {' or '.join(checks)}:\n{_IND * 2}raise _Fallback()")
        return dims

    def loop(self, k, st):
        r = len(st.shape)
        reads = self._reads(st)
        dims = self._dims(k, st, reads)
        idx = [f"i{j}" for j in range(r)]
        # stored loop values: arrays of the loop's shape
        for n in st.nodes:
            t = n.outputs[0]
            if id(t) in self.used_elsewhere and r:
                name = f"s{n.id}"
                self.arrays[id(t)] = name
                self.emit(f"{name} = np.empty(({', '.join(dims)},), {_np_type(t.dtype)})")
        finish = [self._reduction_setup(n, dims) for n in st.reductions]
        depth = 1
        for j in range(r):
            self.emit(f"for i{j} in range({dims[j]}):", depth)
            depth += 1
        # the reads whose values a template uses (zeros_like and broadcast_like read a shape)
        needed = {id(n.inputs[0]) for n in st.reductions}
        for n in st.nodes:
            template = n.op.fused.template(len(n.inputs))
            needed.update(id(t) for j, t in enumerate(n.inputs) if f"{{{j}}}" in template)
        body, vals = [], {}
        for t in reads:
            if id(t) in self.arrays:
                if id(t) in needed:
                    ix = [("0" if s == 1 else idx[jj + r - len(t.shape)]) for jj, s in enumerate(t.shape)]
                    v = vals[id(t)] = f"x{k}_{len(body)}"
                    body.append(f"{v} = {_item(self.arrays[id(t)], ix)}")
            else:
                vals[id(t)] = self.scalars[id(t)]
        for n in st.nodes:
            t = n.outputs[0]
            v = f"v{n.id}"
            body.append(f"{v} = {_expression(n, [vals.get(id(i)) for i in n.inputs])}")
            vals[id(t)] = v
            if id(t) in self.arrays and r:
                body.append(f"{self.arrays[id(t)]}[{', '.join(idx)}] = {v}")
            elif not r:
                self.scalars[id(t)] = v
        for n, (acc, slots, acc_t) in zip(st.reductions, finish):
            x = vals[id(n.inputs[0])]
            target = f"{acc}[{', '.join(idx[j] for j in slots)}]" if slots else acc
            comb = n.op.fused.combine.format(acc=target, x=x)
            body.append(f"{target} = {_np_type(acc_t)}({comb})")
        for b in body:
            self.emit(b, depth)
        for n, (acc, slots, acc_t) in zip(st.reductions, finish):
            self._reduction_finish(k, n, acc, slots, dims)

    def _reduction_setup(self, n, dims):
        """The accumulator: one per kept position and, when the loop's last axis is reduced,
        per element of that axis too (lanes: no value carried from one iteration of the
        innermost loop to the next, so it vectorizes; the lanes are combined after it)."""
        form = n.op.fused
        acc_t = _acc_type(n.inputs[0].dtype, form)
        axes = reduced_axes(n)
        r = len(dims)
        slots = [j for j in range(r) if j not in axes or j == r - 1]
        acc = f"c{n.id}"
        count = " * ".join(dims[j] for j in axes) or "1"
        self.emit(f"n{n.id} = {count}")
        if not form.identity:
            self.emit(f"if n{n.id} == 0:\n{_IND * 2}raise _Fallback()")
        if slots:
            self.emit(f"{acc} = np.full(({', '.join(dims[j] for j in slots)},), {_init(form, acc_t)}, "
                      f"{_np_type(acc_t)})")
        else:
            self.emit(f"{acc} = {_np_type(acc_t)}({_init(form, acc_t)})")
        return acc, slots, acc_t

    def _reduction_finish(self, k, n, acc, slots, dims):
        form, t = n.op.fused, n.outputs[0]
        axes = reduced_axes(n)
        kept = [j for j in range(len(dims)) if j not in axes]
        lanes = bool(slots) and slots[-1] in axes
        keepdims = bool(n.attrs.get("keepdims", False))
        acc_dt = _acc_type(n.inputs[0].dtype, form)
        T, acc_t = _np_type(t.dtype), _np_type(acc_dt)
        at = {j: f"q{q}" for q, j in enumerate(kept)}
        depth = 1
        name = f"r{n.id}"
        if len(t.shape):
            out_dims = [dims[j] if j in kept else "1" for j in range(len(dims))] if keepdims \
                else [dims[j] for j in kept]
            self.emit(f"{name} = np.empty(({', '.join(out_dims)},), {T})")
            self.arrays[id(t)] = name
        for q, j in enumerate(kept):
            self.emit(f"for q{q} in range({dims[j]}):", depth)
            depth += 1
        cell = ", ".join(at[j] for j in kept)
        value = f"{acc}[{cell}]" if kept and not lanes else acc
        if lanes:       # combine the lanes of the last axis
            value = f"t{n.id}"
            self.emit(f"{value} = {acc_t}({_init(form, acc_dt)})", depth)
            self.emit(f"for q_l in range({dims[-1]}):", depth)
            lane = f"{acc}[{cell + ', ' if cell else ''}q_l]"
            self.emit(f"{value} = {acc_t}({form.combine.format(acc=value, x=lane)})", depth + 1)
        final = f"{T}({form.final.format(acc=value, n=f'n{n.id}')})"
        if not len(t.shape):
            v = f"v{n.id}"
            self.emit(f"{v} = {final}", depth)
            self.scalars[id(t)] = v
            return
        out_idx = [at.get(j, "0") for j in range(len(dims))] if keepdims else [at[j] for j in kept]
        self.emit(f"{name}[{', '.join(out_idx) or '()'}] = {final}", depth)


def region_source(stages, where, inputs, outputs):
    """(source, argument tensors) of the region: `inputs` minus inlined constants."""
    w = _Writer(stages, where, inputs, outputs)
    src = w.source()
    return src, [t for t in inputs if not inlined_constant(t)]
