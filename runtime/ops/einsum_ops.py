"""einsum and tensordot: declarations and public functions.

`einsum` is one op whose `equation` attr is the explicit, rank-resolved form of what the user
wrote ("ij,jk" becomes "ij,jk->ik"; a `...` covering no axes is dropped). Its kernel contracts
the operands pairwise (smallest intermediate first) with numpy's matmul, so every contraction
that is a (batched) matrix product runs in BLAS; the per-shape plan is cached. The gradient of
each operand is another einsum (plus, for repeated labels such as a trace, `einsum_expand`
that puts the values back on the diagonal), so every order of derivative is again einsum.
`tensordot` is written as the einsum it is.
"""
import math
import re
import string

import numpy as np
from numpy.lib.stride_tricks import as_strided

from defun.runtime import errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.ops._onnx import scatter_adjoint
from defun.runtime.ops.array_ops import ones_like
from defun.runtime.ops.axis_ops import _check_same_arrays
from defun.runtime.ops.index_ops import _rank
from defun.runtime.ops.complex_ops import conj
from defun.runtime.ops.math_ops import reduce_sum, unbroadcast
from defun.runtime.registry import Cost, register
from defun.runtime.tape import skip_input_indices
from defun.runtime import batching as bt

__all__ = ["einsum", "tensordot"]

_LETTERS = frozenset(string.ascii_letters)


# ---------------------------------------------------------------------------------------
# Equations. Inside this module a term is a string of letters in which "." stands for "...".

def _fail(equation, message):
    raise errors.InvalidArgumentError(f"einsum: equation {equation!r}: {message}")


def _term(equation, text):
    t = text.replace("...", ".")
    for c in t:
        if c != "." and c not in _LETTERS:
            _fail(equation, f"invalid subscript {c!r} in {text!r} (use letters a-z, A-Z and '...')")
    if t.count(".") > 1:
        _fail(equation, f"{text!r} holds more than one '...'")
    return t


_PARSED = {}


def _parse(equation):
    """(input terms, output term) of `equation`; the output made explicit if it was implicit."""
    parsed = _PARSED.get(equation)
    if parsed is not None:
        return parsed
    text = equation.replace(" ", "")
    if text.count("->") > 1:
        _fail(equation, "more than one '->'")
    lhs, arrow, rhs = text.partition("->")
    ins = tuple(_term(equation, t) for t in lhs.split(","))
    if arrow:
        out = _term(equation, rhs)
        for c in out:
            if out.count(c) > 1:
                _fail(equation, f"output subscript {c!r} appears more than once")
            if c != "." and not any(c in t for t in ins):
                _fail(equation, f"output subscript {c!r} does not appear in the inputs")
        if "." in out and not any("." in t for t in ins):
            _fail(equation, "the output has '...' but no input does")
    else:  # implicit: '...' first, then the labels used exactly once, in alphabetical order
        counts = {}
        for c in "".join(ins).replace(".", ""):
            counts[c] = counts.get(c, 0) + 1
        out = ("." if any("." in t for t in ins) else "") + "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(_PARSED) >= 4096:
        _PARSED.clear()
    _PARSED[equation] = parsed = (ins, out)
    return parsed


def _text(term):
    return term.replace(".", "...")


def _equation(ins, out):
    return ",".join(_text(t) for t in ins) + "->" + _text(out)


def _ellipsis_ranks(equation, ins, ranks):
    """How many axes each operand's '...' covers (0 without one); checks the ranks."""
    out = []
    for k, (t, r) in enumerate(zip(ins, ranks)):
        named = len(t) - ("." in t)
        if "." in t and r >= named:
            out.append(r - named)
        elif "." not in t and r == named:
            out.append(0)
        else:
            _fail(equation, f"operand {k} has rank {r} but its subscripts {_text(t)!r} name {named} axes"
                  + ("" if "." in t else " (use '...' for the others)"))
    return out


_CANONICAL = {}


def _canonical(equation, ranks):
    """The explicit equation for operands of these ranks, '...' kept only where it covers axes."""
    key = (equation, ranks)
    eq = _CANONICAL.get(key)
    if eq is not None:
        return eq
    ins, out = _parse(equation)
    if len(ins) != len(ranks):
        _fail(equation, f"{len(ins)} input subscript{'s' if len(ins) != 1 else ''} but {len(ranks)} "
                        f"operand{'s' if len(ranks) != 1 else ''}")
    ell = _ellipsis_ranks(equation, ins, ranks)
    if max(ell, default=0) and "." not in out:
        _fail(equation, "the '...' axes of the inputs must appear in the output (write '...' after '->')")
    ins = [t.replace(".", "") if e == 0 else t for t, e in zip(ins, ell)]
    out = out if max(ell, default=0) else out.replace(".", "")
    if len(_CANONICAL) >= 4096:
        _CANONICAL.clear()
    _CANONICAL[key] = eq = _equation(ins, out)
    return eq


def _resolve(equation, ins, out, shapes):
    """(output shape, size of each label, '...' shape, each operand's '...' rank) for static
    shapes (None = unknown); raises naming the equation when sizes disagree."""
    ell_ranks = _ellipsis_ranks(equation, ins, [len(s) for s in shapes])
    sizes, where = {}, {}
    ells = []
    for k, (t, s, e) in enumerate(zip(ins, shapes, ell_ranks)):
        dims = list(s)
        if "." in t:
            p = t.index(".")
            ells.append(tuple(dims[p:p + e]))
            del dims[p:p + e]
        for c, d in zip(t.replace(".", ""), dims):
            known = sizes.get(c)
            if known is None:
                sizes[c], where[c] = d, (k, s)
            elif d is not None and d != known:
                j, sj = where[c]
                _fail(equation, f"label {c!r} has size {known} in operand {j} (shape {shape_rules.shape_str(sj)}) "
                                f"but size {d} in operand {k} (shape {shape_rules.shape_str(s)})")
    ell = ()
    for e in ells:
        try:
            ell = shape_rules.broadcast_shapes("einsum", ell, e)
        except errors.InvalidArgumentError:
            _fail(equation, f"the '...' axes of the operands, {', '.join(shape_rules.shape_str(x) for x in ells)}, "
                            f"do not broadcast together")
    shape = []
    for c in out:
        shape.extend(ell if c == "." else (sizes[c],))
    return tuple(shape), sizes, ell, ell_ranks


# ---------------------------------------------------------------------------------------
# The kernel: a plan per (equation, shapes), run on the arrays

def _prod(sizes):
    return math.prod(sizes)


def _prepare(labels, shape, size, others, out_labels):
    """Steps for one operand alone: drop its size-1 axes that broadcast against others, take
    diagonals of repeated labels, sum the labels nobody else has. -> (fn or None, labels)."""
    steps = []
    keep = [i for i, l in enumerate(labels) if not (isinstance(l, int) and shape[i] == 1 and size[l] != 1)]
    if len(keep) != len(labels):
        new_shape = tuple(shape[i] for i in keep)
        steps.append(lambda a, s=new_shape: a.reshape(s))
        labels = [labels[i] for i in keep]
    if len(set(labels)) != len(labels):
        letters = {l: string.ascii_letters[i] for i, l in enumerate(dict.fromkeys(labels))}
        unique = list(dict.fromkeys(labels))
        eq = "".join(letters[l] for l in labels) + "->" + "".join(letters[l] for l in unique)
        steps.append(lambda a, eq=eq: np.einsum(eq, a))  # a view
        labels = unique
    lonely = tuple(i for i, l in enumerate(labels) if l not in others and l not in out_labels)
    if lonely:
        steps.append(lambda a, axes=lonely: np.add.reduce(a, axis=axes, dtype=a.dtype))
        labels = [l for i, l in enumerate(labels) if i not in lonely]
    if not steps:
        return None, labels
    if len(steps) == 1:
        return steps[0], labels

    def run(a):
        for step in steps:
            a = step(a)
        return a
    return run, labels


def _pair(la, lb, keep, size):
    """Contract two operands: -> (fn(a, b), result labels). Shared labels not kept are summed
    by a matmul over (batch, kept-from-a, summed) x (batch, summed, kept-from-b)."""
    sum_a = tuple(i for i, l in enumerate(la) if l not in lb and l not in keep)
    sum_b = tuple(i for i, l in enumerate(lb) if l not in la and l not in keep)
    la = [l for i, l in enumerate(la) if i not in sum_a]
    lb = [l for i, l in enumerate(lb) if i not in sum_b]
    batch = [l for l in la if l in lb and l in keep]
    summed = [l for l in la if l in lb and l not in keep]
    only_a = [l for l in la if l not in lb]
    only_b = [l for l in lb if l not in la]
    perm_a = tuple(la.index(l) for l in batch + only_a + summed)
    perm_b = tuple(lb.index(l) for l in batch + summed + only_b)
    bs, ms, ns = [size[l] for l in batch], [size[l] for l in only_a], [size[l] for l in only_b]
    out_shape = tuple(bs + ms + ns)
    if summed:
        m, k, n = _prod(ms), _prod(size[l] for l in summed), _prod(ns)
        shape_a, shape_b = ((_prod(bs), m, k), (_prod(bs), k, n)) if batch else ((m, k), (k, n))
        op = np.matmul
        if not batch and m == 1 and n == 1:  # a full contraction: a dot of two vectors
            shape_a, shape_b, op = (k,), (k,), np.dot
    else:  # nothing summed: a broadcasting product (outer products, elementwise)
        shape_a = tuple(bs + ms + [1] * len(ns))
        shape_b = tuple(bs + [1] * len(ms) + ns)
        op = np.multiply
    # the axis order of a matrix product is often already right: no transpose call then
    ident_a, ident_b = perm_a == tuple(range(len(la))), perm_b == tuple(range(len(lb)))
    if ident_a and ident_b:
        def contract(a, b):
            return op(a.reshape(shape_a), b.reshape(shape_b)).reshape(out_shape)
    else:
        def contract(a, b):
            return op((a if ident_a else a.transpose(perm_a)).reshape(shape_a),
                      (b if ident_b else b.transpose(perm_b)).reshape(shape_b)).reshape(out_shape)
    if sum_a or sum_b:
        inner = contract

        def contract(a, b):
            if sum_a:
                a = np.add.reduce(a, axis=sum_a, dtype=a.dtype)
            if sum_b:
                b = np.add.reduce(b, axis=sum_b, dtype=b.dtype)
            return inner(a, b)
    return contract, batch + only_a + only_b


def _build_plan(equation, shapes):
    ins, out = _parse(equation)
    _, sizes, ell, ell_ranks = _resolve(equation, ins, out, shapes)
    rank = len(ell)

    def expand(term, e):  # '...' becomes the ints rank-e .. rank-1 (right-aligned broadcasting)
        labels = []
        for c in term:
            labels.extend(range(rank - e, rank) if c == "." else (c,))
        return labels
    size = dict(sizes)
    size.update(enumerate(ell))
    out_labels = expand(out, rank)
    labels = [expand(t, e) for t, e in zip(ins, ell_ranks)]
    steps = []  # (kind, a, b, fn): ("prep", k, None, fn) | ("pair", i, j, fn) | ("final", perm, None, None)
    for k, (ls, s) in enumerate(zip(labels, shapes)):
        others = set(l for j, o in enumerate(labels) if j != k for l in o)
        fn, labels[k] = _prepare(ls, s, size, others, set(out_labels))
        if fn is not None:
            steps.append(("prep", k, None, fn))
    current = list(labels)
    while len(current) > 1:  # greedily, the pair with the smallest result
        best = None
        for i in range(len(current)):
            for j in range(i + 1, len(current)):
                rest = set(out_labels).union(*(current[m] for m in range(len(current)) if m not in (i, j)))
                fn, res = _pair(current[i], current[j], rest, size)
                cost = _prod(size[l] for l in res)
                if best is None or cost < best[0]:
                    best = (cost, i, j, fn, res)
        _, i, j, fn, res = best
        steps.append(("pair", i, j, fn))
        current = [c for m, c in enumerate(current) if m not in (i, j)] + [res]
    perm = tuple(current[0].index(l) for l in out_labels)
    if perm != tuple(range(len(perm))):
        steps.append(("final", perm, None, None))
    return _compile(steps)


def _compile(steps):
    """One callable running the plan's steps; the common one-step plans call their step directly."""
    if len(steps) == 1:
        kind, a, b, fn = steps[0]
        if kind == "pair":
            return fn
        if kind == "prep":
            return fn
        return lambda x: x.transpose(a)
    if not steps:
        return lambda x: x

    def run(*arrays):
        arrays = list(arrays)
        for kind, a, b, fn in steps:
            if kind == "prep":
                arrays[a] = fn(arrays[a])
            elif kind == "pair":
                r = fn(arrays[a], arrays[b])
                arrays = [x for m, x in enumerate(arrays) if m not in (a, b)] + [r]
            else:
                arrays[0] = arrays[0].transpose(a)
        return arrays[0]
    return run


_PLANS = {}


def _einsum_kernel(*operands, equation):
    _check_same_arrays("einsum", operands)
    key = (equation,) + tuple(x.shape for x in operands)
    run = _PLANS.get(key)
    if run is None:
        run = _build_plan(equation, [x.shape for x in operands])
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        _PLANS[key] = run
    return run(*operands)


def _einsum_infer(shapes, dts, attrs):
    equation = attrs["equation"]
    if not dts:
        raise errors.InvalidArgumentError("einsum: needs at least one operand")
    shape_rules.check_same("einsum", dts)
    shape_rules.check_kinds("einsum", dts[0], shape_rules.numeric_complex_kinds)
    ins, out = _parse(equation)
    if len(ins) != len(shapes):
        _fail(equation, f"{len(ins)} input subscripts but {len(shapes)} operands")
    return [(_resolve(equation, ins, out, shapes)[0], dts[0])]


# ---------------------------------------------------------------------------------------
# Gradients

def _einsum_grad(op, g):
    """d/d operand k: the einsum of g and the other operands giving k's labels (each once,
    '...' first); summed down where k's '...' was broadcast, then laid out as k's subscripts."""
    ins, out = _parse(op.attrs["equation"])
    xs = op.inputs
    skip = skip_input_indices(op)
    out_ell = _ellipsis_of(out, tuple(op.outputs[0].shape)) if "." in out else ()
    grads = []
    for k, t in enumerate(ins):
        x = xs[k]
        if k in skip or not x.dtype.is_inexact:
            grads.append(None)
            continue
        labels = "".join(dict.fromkeys(t.replace(".", "")))
        # '...' first; where k has none, the '...' axes of the others are summed after
        target = ("." if "." in out else "") + labels
        terms = [out] + [s for j, s in enumerate(ins) if j != k]
        operands = [g] + [conj(o) for j, o in enumerate(xs) if j != k]   # (conj: complex_ops)
        present = set("".join(terms))
        if any(c not in present for c in labels):
            # a label only k has (summed within k): ones shaped like k supply its size
            terms.append(t)
            operands.append(ones_like(x))
        r = operands[0] if terms == [target] else einsum(_equation(terms, target), *operands)
        if "." not in t and "." in out:
            r = reduce_sum(r, axis=tuple(range(len(out_ell))))
            target = labels
        if "." in t:
            x_ell = _ellipsis_of(t, tuple(x.shape))
            if x_ell != out_ell or None in x_ell:  # k's '...' axes may have been broadcast
                like = x if t == target else einsum(_equation([t], target), x)
                r = unbroadcast(r, like)
        if target != t:
            eq = _equation([target], t)
            r = run_op(_EXPAND, (r,), {"equation": eq}) if len(set(t)) < len(t) else einsum(eq, r)
        grads.append(r)
    return grads


def _ellipsis_of(term, shape):
    """The sizes the '...' of `term` covers in `shape`."""
    p = term.index(".")
    return shape[p:p + len(shape) - len(term) + 1]


def _einsum_onnx(e, node, ins):
    """ONNX Einsum, behind an If giving zeros when an operand is empty (onnxruntime's Einsum
    divides by zero there). The zeros' shape: static, or each output label's size from an
    operand having it (with '...' and unknown sizes, no guard)."""
    eq = node.attrs["equation"]
    out = node.outputs[0]
    einsum_ = lambda: e.op("Einsum", *ins, equation=eq)  # noqa: E731
    shapes = [tuple(t.shape) for t in node.inputs]
    if all(None not in s and 0 not in s for s in shapes):
        return einsum_()
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if None not in out.shape:
        shape = e.ints(out.shape)
    elif "." in eq:
        return einsum_()
    else:
        sizes = []
        for c in rhs:
            k = next(k for k, t in enumerate(terms) if c in t)
            sizes.append(e.dim(ins[k], terms[k].index(c), shapes[k]))
        shape = e.op("Concat", *sizes, axis=0) if sizes else e.ints([])
    counts = e.op("Concat", *[e.op("Reshape", e.op("Size", x), e.ints([1])) for x in ins], axis=0)
    empty = e.op("Equal", e.reduce("ReduceMin", counts, None, False), e.scalar(0, "int64"))
    types = [(out.shape, out.dtype)]
    zeros = e.subgraph([], lambda _: [e.op("Expand", e.scalar(0, out.dtype), shape)], types, name="empty")
    full = e.subgraph([], lambda _: [einsum_()], types, name="einsum")
    return e.op("If", empty, then_branch=zeros, else_branch=full)


def _einsum_work(shapes, out_shapes, attrs):
    """numpy's count of the operations of the pairwise contraction order (its einsum_path,
    given arrays of the shapes that hold one element each): a contraction is charged for
    every product it forms, not only for the elements it reads."""
    dummies = [as_strided(np.zeros(1), s, [0] * len(s)) for s in shapes]
    try:
        _, text = np.einsum_path(attrs["equation"], *dummies, optimize="greedy")
    except ValueError:     # the kernel says what is wrong
        return 0
    found = re.search(r"Optimized FLOP count:\s*([0-9.e+]+)", text)
    return int(float(found.group(1))) if found else 0


def _einsum_batch(ctx, node, inputs, batched):
    """A new letter for the batch, on every batched operand and on the result."""
    eq = node.attrs["equation"].replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not arrow:
        letters = [c for c in lhs if c.isalpha()]
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    free = [c for c in string.ascii_letters if c not in eq]
    if not free:
        raise errors.UnimplementedError("einsum: the equation uses every letter; none is left for the batch")
    b = free[0]
    terms = [b + t if flag else t for t, flag in zip(terms, batched)]
    return bt.all_batched(bt.emit(node, inputs, {"equation": ",".join(terms) + "->" + b + rhs}))


_EINSUM = register(
    name="einsum",
    kernel=_einsum_kernel,
    infer=_einsum_infer,
    grad=_einsum_grad,
    num_inputs=None,
    attrs={"equation": "str"},
    defaults={},
    kinds=shape_rules.numeric_complex_kinds,
    onnx=_einsum_onnx,
    batch=_einsum_batch,
    cost=Cost(work=_einsum_work),
)


# Internal: the adjoint of a one-operand einsum that takes diagonals, "ij->iij" puts x[i, j]
# at out[i, i, j] and zeros elsewhere (the gradient of einsum w.r.t. an operand with a
# repeated label, e.g. a trace). Its gradient is that einsum.
def _expand_parts(equation):
    src, arrow, dst = equation.partition("->")
    src, dst = _term(equation, src), _term(equation, dst)
    if not arrow or len(set(src)) != len(src) or set(src) != set(dst):
        _fail(equation, "einsum_expand needs distinct input labels, each used in the output")
    return src, dst


def _expand_shape(equation, shape):
    src, dst = _expand_parts(equation)
    _, sizes, ell, _ = _resolve(equation, (src,), src, [shape])
    out = []
    for c in dst:
        out.extend(ell if c == "." else (sizes[c],))
    return tuple(out)


def _expand_kernel(x, equation):
    src, dst = _expand_parts(equation)
    out = np.zeros(_expand_shape(equation, x.shape), x.dtype)
    np.einsum(_equation([dst], src), out)[...] = x  # a writable view of the diagonals
    return out


def _expand_grad(op, g):
    src, dst = _expand_parts(op.attrs["equation"])
    return [einsum(_equation([dst], src), g)]


def _expand_onnx(e, node, ins):
    """Scatter x into zeros of the output's shape at the diagonal positions the reverse
    einsum (out -> x) reads (the output's shape: static, or by label from x's)."""
    src, dst = _expand_parts(node.attrs["equation"])
    out = node.outputs[0]
    if None not in out.shape:
        shape = e.ints(out.shape)
    else:
        x = node.inputs[0]
        dot = src.index(".") if "." in src else len(src)
        n_ell = len(x.shape) - len(src) + 1 if "." in src else 0
        parts = [e.op("Shape", ins[0], start=dot, end=dot + n_ell) if c == "." else
                 e.dim(ins[0], src.index(c) + (n_ell - 1 if src.index(c) > dot else 0)) for c in dst]
        shape = e.op("Concat", *parts, axis=0)
    return scatter_adjoint(e, ins[0], shape, out.dtype, lambda idx: e.op(
        "Einsum", idx, equation=_equation([dst], src)))


_EXPAND = register(
    name="einsum_expand",
    kernel=_expand_kernel,
    infer=lambda shapes, dts, attrs: [(_expand_shape(attrs["equation"], tuple(shapes[0])), dts[0])],
    grad=_expand_grad,
    num_inputs=1,
    attrs={"equation": "str"},
    defaults={},
    kinds=shape_rules.numeric_complex_kinds,
    onnx=_expand_onnx,
    batch=_einsum_batch,
)


# ---------------------------------------------------------------------------------------
# Public functions

def einsum(equation, *inputs, name=None):
    """Einstein summation: each operand's axes are named by letters; letters shared between
    operands and absent from the output are summed. `...` stands for broadcast axes, and
    without `->` the output is the letters used once, in alphabetical order.

    >>> df.einsum("ij,jk->ik", a, b)         # a @ b
    >>> df.einsum("bij,bjk->bik", a, b)      # batched matmul
    >>> df.einsum("ii", m)                   # trace
    """
    if not isinstance(equation, str):
        raise _args.error(f"einsum: the equation must be a string, got {type(equation).__name__}", TypeError)
    if not inputs:
        raise _args.error(f"einsum: equation {equation!r} needs at least one operand")
    try:
        eq = _canonical(equation, tuple(_rank(x) for x in inputs))
    except errors.InvalidArgumentError as e:
        raise _args.error(str(e)) from None
    return run_op(_EINSUM, inputs, {"equation": eq}, name)


def _axes_list(name, axes, rank):
    out = []
    for a in axes:
        a = _args.int_arg("tensordot", a, f"an axis of {name}")
        if not -rank <= a < rank:
            raise _args.error(f"tensordot: axis {a} is out of range for {name}, a tensor of rank {rank}")
        out.append(a % rank)
    if len(set(out)) != len(out):
        raise _args.error(f"tensordot: axes {list(axes)} of {name} repeat an axis")
    return out


def tensordot(a, b, axes, name=None):
    """Sum of products over `axes`: an int n pairs the last n axes of `a` with the first n of
    `b`; a pair of lists pairs them one by one. The result holds the other axes of `a`, then
    those of `b`: `df.tensordot(x, y, 1)` is `x @ y` for matrices.
    """
    ra, rb = _rank(a), _rank(b)
    if hasattr(axes, "numpy"):  # an eager tensor
        axes = axes.numpy()
    if not isinstance(axes, (list, tuple)) and not (isinstance(axes, np.ndarray) and axes.ndim):
        n = _args.int_arg("tensordot", axes, "axes")
        if not 0 <= n <= min(ra, rb):
            raise _args.error(
                f"tensordot: axes={n} must be between 0 and the smaller rank ({ra} and {rb})")
        axes_a, axes_b = list(range(ra - n, ra)), list(range(n))
    else:
        pair = axes.tolist() if isinstance(axes, np.ndarray) else list(axes)
        if len(pair) != 2:
            raise _args.error(f"tensordot: axes must be an int or a pair of lists, got {axes!r}")
        axes_a, axes_b = [[p] if isinstance(p, (int, np.integer)) else list(p) for p in pair]
        if len(axes_a) != len(axes_b):
            raise _args.error(
                f"tensordot: {len(axes_a)} axes of a but {len(axes_b)} of b in axes={axes!r}")
        axes_a, axes_b = _axes_list("a", axes_a, ra), _axes_list("b", axes_b, rb)
    if ra + rb - len(axes_a) > len(string.ascii_letters):
        raise _args.error(f"tensordot: ranks {ra} and {rb} are too large")
    sa, sb = tuple(getattr(a, "shape", np.shape(a))), tuple(getattr(b, "shape", np.shape(b)))
    for i, j in zip(axes_a, axes_b):
        if sa[i] is not None and sb[j] is not None and sa[i] != sb[j]:
            raise _args.error(
                f"tensordot: axis {i} of a (shape {shape_rules.shape_str(sa)}) has size {sa[i]} but axis {j} of b "
                f"(shape {shape_rules.shape_str(sb)}) has size {sb[j]}")
    letters = iter(string.ascii_letters)
    ta = [next(letters) for _ in range(ra)]
    tb = [None] * rb
    for i, j in zip(axes_a, axes_b):
        tb[j] = ta[i]
    tb = [c if c is not None else next(letters) for c in tb]
    out = [c for i, c in enumerate(ta) if i not in axes_a] + [c for j, c in enumerate(tb) if j not in axes_b]
    return einsum(f"{''.join(ta)},{''.join(tb)}->{''.join(out)}", a, b, name=name)
