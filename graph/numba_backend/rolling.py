"""Repeated structure in a run of fused nodes, found so that it is compiled once, as a loop.

A Python loop that the trace unrolled (`for _ in range(100): x = tanh(x) * 1.01 + 0.1`)
gives a run of nodes repeating the same few ops, and its backward another. Written out
node by node, such a run costs numba (LLVM) seconds to compile; rolled, it is one loop
over the repetitions around the usual loop nest over the elements, whatever the count.

`roll(run)` returns the run as items in program order: nodes, and `Rolled` blocks. A block
is `count` repetitions of `period` elementwise nodes of one static output shape where each
input of each node is, in every repetition alike:
- ("same", q): the output of node q of the same repetition;
- ("carry", q): the output of node q of the previous repetition (the first repetition
  reads the block's `inits[q]` instead);
- ("fixed", id(t)): one tensor from before the block, the same in every repetition, or
  ("const", dtype, value): a scalar constant of that value (any node of it);
- ("stack", block, q, a, b): node q of an earlier block's repetition a + b * m (for the
  m-th repetition of this one): a backward reading its forward's values newest first.
Values of a block's repetitions read after it are kept per repetition (the codegen's
"stacks"), a carry's last value in its carry array.
"""
from defun.runtime.fused import Elementwise
from defun.graph.numba_backend.plan import Rolled, inlined_constant

__all__ = ["roll", "MIN_COUNT", "MAX_PERIOD"]


def _constant_key(t):
    """What a scalar constant the codegen inlines is compared by (its value), else None."""
    if not inlined_constant(t):
        return None
    return ("const", t.dtype.np.str, repr(t.node.attrs["value"].item()))

MIN_COUNT = 3       # fewer repetitions are written out
MAX_PERIOD = 16     # nodes in one repetition, at most


def _eligible(node, shape):
    if not isinstance(node.op.fused, Elementwise) or len(node.outputs) != 1:
        return False
    out = node.outputs[0].shape      # static inputs: every read is in bounds without a check
    return out == shape and all(len(t.shape) <= len(shape) and None not in t.shape for t in node.inputs)


class _Finder:
    def __init__(self, run):
        self.run = run
        self.names = [n.op.name for n in run]
        self.pos = {id(t): k for k, n in enumerate(run) for t in n.outputs}
        self.owner = {}     # id(tensor) -> (block, repetition, slot), for tensors made in blocks

    def classes(self, s, p, m):
        """[[class of each input] of each node] of repetition m of a block at s of period p,
        with stacks as ("stack", block, slot, repetition); None if one reads further back."""
        out = []
        start = s + m * p
        for n in self.run[start:start + p]:
            row = []
            for t in n.inputs:
                j = self.pos.get(id(t))
                if j is not None and j >= s:
                    mj, qj = divmod(j - s, p)
                    if mj == m:
                        row.append(("same", qj))
                    elif mj == m - 1:
                        row.append(("carry", qj))
                    else:
                        return None
                    continue
                own = self.owner.get(id(t))
                if own is not None:
                    row.append(("stack", own[0], own[2], own[1]))
                else:       # (by id: == on tensors is an op)
                    key = _constant_key(t)
                    row.append(("fixed", id(t)) if key is None else key)
            out.append(row)
        return out

    def same_nodes(self, a, b):
        """Nodes a and b compute the same op on values of the same types."""
        try:
            same_attrs = a.attrs == b.attrs
        except ValueError:      # array attrs: not compared here
            return False
        return (a.op is b.op and same_attrs is True and a.outputs[0].dtype == b.outputs[0].dtype
                and all(x.dtype == y.dtype and x.shape == y.shape for x, y in zip(a.inputs, b.inputs)))

    def block(self, s, p):
        """The longest block at s of period p (None: fewer than MIN_COUNT repetitions)."""
        run, names = self.run, self.names
        shape = run[s].outputs[0].shape if len(run[s].outputs) == 1 else None
        if not shape or None in shape or not all(_eligible(n, shape) for n in run[s:s + p]):
            return None
        first = self.classes(s, p, 0)
        second = self.classes(s, p, 1)
        if first is None or second is None:
            return None
        inits, steps = {}, {}
        for q, (r0, r1) in enumerate(zip(first, second)):
            if not self.same_nodes(run[s + q], run[s + p + q]):
                return None
            for j, (c0, c1) in enumerate(zip(r0, r1)):
                if c1[0] == "carry" and c0[0] not in ("same", "carry"):
                    if inits.setdefault(c1[1], run[s + q].inputs[j]) is not run[s + q].inputs[j]:
                        return None
                elif c0[0] == c1[0] == "stack" and c0[1:3] == c1[1:3]:
                    steps[(q, j)] = c1[3] - c0[3]
                elif c0 != c1:
                    return None
        m = 2
        while s + (m + 1) * p <= len(run) and names[s + m * p:s + (m + 1) * p] == names[s:s + p]:
            if not self._repeats(s, p, m, second, steps):
                break
            m += 1
        if m < MIN_COUNT:
            return None
        reps = [run[s + k * p:s + (k + 1) * p] for k in range(m)]
        classes = [[c if c[0] != "stack" else ("stack", c[1], c[2], c[3] - steps[(q, j)], steps[(q, j)])
                    if steps[(q, j)] else ("fixed", id(run[s + p + q].inputs[j]))
                    for j, c in enumerate(row)] for q, row in enumerate(second)]
        if any(c[0] == "stack" and not 0 <= c[3] + k * c[4] < c[1].count
               for row in classes for c in row for k in (0, m - 1)):
            return None
        return Rolled(shape, reps, classes, inits)

    def _repeats(self, s, p, m, second, steps):
        got = self.classes(s, p, m)
        if got is None:
            return False
        for q, (row, want) in enumerate(zip(got, second)):
            if not self.same_nodes(self.run[s + q], self.run[s + m * p + q]):
                return False
            for j, (c, w) in enumerate(zip(row, want)):
                if c[0] == "stack" and w[0] == "stack" and c[1:3] == w[1:3]:
                    if c[3] - w[3] != (m - 1) * steps[(q, j)]:
                        return False
                elif c != w:
                    return False
        return True


def roll(run, max_period=MAX_PERIOD):
    """`run` (fusible nodes in program order) as nodes and `Rolled` blocks, in order."""
    f = _Finder(run)
    items, s = [], 0
    while s < len(run):
        best = None
        for p in range(1, max_period + 1):
            if s + MIN_COUNT * p > len(run):
                break
            if f.names[s:s + p] != f.names[s + p:s + 2 * p]:
                continue
            b = f.block(s, p)
            if b is not None and (best is None or b.count * p > best.count * best.period):
                best = b
        if best is None:
            items.append(run[s])
            s += 1
            continue
        for m, rep in enumerate(best.reps):
            for q, n in enumerate(rep):
                f.owner[id(n.outputs[0])] = (best, m, q)
        items.append(best)
        s += best.count * best.period
    return items
