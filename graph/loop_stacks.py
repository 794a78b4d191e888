"""What a loop or a cond keeps for its gradient: an inner loop's stacks, a branch's stand-ins.

An inner `while`'s stacked values are as long as its trip count, which may differ per outer
iteration; an outer loop keeping them pads each to the longest (zeros at the end of each
axis). Nothing reads the padding: the inner loop's gradient reads rows below its own count,
kept beside them.
"""
import numpy as np

from defun.runtime.ops.array_ops import pad

__all__ = ["is_loop_stack", "is_stand_in", "padded", "padded_tensors"]


def is_loop_stack(t):
    """True if symbolic `t` is what an inner `while` stacked per iteration (through calls,
    conds, identities, and the batch-first transpose of a batched loop's stack)."""
    node = t.node
    name = node.op.name
    if name == "while":
        return t.index > len(node.attrs["body"].outputs) - (node.attrs["saves"] or 0)
    if name == "call":
        return is_loop_stack(node.attrs["f"].outputs[t.index])
    if name == "cond":
        return any(is_loop_stack(g.outputs[t.index]) for g in (node.attrs["then_branch"], node.attrs["else_branch"]))
    if name == "identity" or (name == "transpose" and tuple(node.attrs["perm"][:2]) == (1, 0)):
        return is_loop_stack(node.inputs[0])
    return False


def is_stand_in(branch, k):
    """True if output `k` of cond branch `branch` is the empty constant standing for a side
    output of the other branch (graph/control_flow.py, _with_extras): past the outputs of
    the user's own function, which the raised branch returns first. Batched with a
    predicate per example, the other branch's value is taken whole, as only the examples
    that ran that branch read it."""
    own = branch
    while own.derived.saves_for is not None:
        own = own.derived.saves_for
    if own is branch:   # a loaded document's raised branch (no saves_for kept) or the user's own: by its form
        return _empty(branch.outputs[k]) and _raised_form(branch)
    return k >= len(own.outputs) and _empty(branch.outputs[k])


def _empty(t):
    return t.node.op.name == "const" and t.node.attrs["value"].size == 0


def _raised_form(branch):
    """True if `branch` has the form _with_extras gives a raised branch: its inputs, one call
    of the function with side outputs, and stand-ins (constants of shape (0,) * rank, a
    scalar for a scalar); its outputs those of the call, in order, with stand-ins among or
    after them (a document keeps no `saves_for`). A user's branch returning a defun's call
    and an empty constant against a non-empty value has that form too: such a ragged cond
    has no batched value, and takes the other's."""
    calls = [n for n in branch.nodes if n.op.name == "call"]
    if len(calls) != 1 or any(n.op.name not in ("placeholder", "call", "const") for n in branch.nodes):
        return False
    pad = lambda t: t.node.op.name == "const" and not any(t.node.attrs["value"].shape)  # noqa: E731
    return [id(t) for t in branch.outputs if not pad(t)] == [id(t) for t in calls[0].outputs]


def _largest(shapes):
    return tuple(max(sizes) for sizes in zip(*shapes))


def padded(rows):
    """numpy arrays `rows` of one rank zero-padded at the end of each axis to the largest size there."""
    big = _largest(r.shape for r in rows)
    return [r if r.shape == big else np.pad(r, [(0, b - s) for s, b in zip(r.shape, big)]) for r in rows]


def padded_tensors(values):
    """`padded` for tensors, by `pad` ops (recorded on the tapes listening)."""
    big = _largest(tuple(v.shape) for v in values)
    return [v if tuple(v.shape) == big else pad(v, [(0, b - s) for s, b in zip(v.shape, big)]) for v in values]
