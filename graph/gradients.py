"""Graph-level gradients: the backward of a function, and what its forward saves for it.

`build_backward(f)`: the forward graph's nodes, in order, form a tape (each entry's backward
calls the op's registered gradient on the node); `imperative_grad` then runs with a new
graph as the builder, so every gradient op becomes a node there. Forward tensors the
gradient code reads are captured into the backward graph: those captures are the side
outputs, which the forward function returns next to its outputs. Nothing is recomputed:
every value the backward needs, variable reads included, comes from the forward's run.

A node running a function (call, cond, while) needs values from inside that function.
Its gradient raises the node one *level* in place: its function becomes the function's
forward with side outputs (which returns the old outputs first), and the node gains the
extra outputs (graph.functions.add_side_outputs). Only a graph being built can change, so
`build_backward` works on a copy of a finalized forward that holds such nodes (the
original, which plain calls run, never pays for side outputs). Higher orders repeat this:
the forward with side outputs is a function like any other, with its own Saving.
"""
import enum
import threading

from defun.runtime import errors, tape as tape_mod
from defun.runtime.autodiff import imperative_grad
from defun.runtime.indexed_slices import IndexedSlices
from defun.graph.analysis import live_node_ids
from defun.graph.input_gradients import DenseGrad, SlicesGrad
from defun.graph.ir import Graph
from defun.graph.nodes import PLACEHOLDER, SymbolicTensor
from defun.graph.rewrite import GraphCopy

__all__ = ["build_backward", "Backward", "Saving", "Source", "saving_of", "saving_from", "levels_of",
           "pick_level", "capture_sources", "LOCK"]

# One lock for everything derived for gradients (savings, levels, rematerialized backwards):
# each is built once, whichever thread asks first; re-entrant, as building one builds others.
LOCK = threading.RLock()

# Levels a function may be raised through before we call it a runaway (each level is a
# forward with side outputs of the one below; real programs converge in a few).
MAX_LEVELS = 32

# Loops and branches nested in each other that a gradient goes through (docs/guide.md): each
# loop level stacks its saved values one dimension higher (numpy's limit is 64 dimensions),
# and building a level's backward recurses into the next. Deeper is refused, naming this.
MAX_NESTING = 32


class _Depth(threading.local):
    n = 0      # savings being built in this thread, inside each other


_depth = _Depth()


class Source(str, enum.Enum):
    """Where a backward capture's value comes from: the kind in each (kind, v) pair of
    `Backward.capture_sources`, which every reader of them shares (the backward's feed, a
    first-order call's, loops, exports). INPUT: v is k, the forward function's k-th input;
    SIDE: v is j, its j-th side output; VALUE: v is an outer value (a captured tensor).
    A str equal to its lower-case name, which is how it prints and documents write it."""

    INPUT = "input"
    SIDE = "side"
    VALUE = "value"

    # printed as its text ('input'), as documents and listings write it
    __str__, __repr__, __format__ = str.__str__, str.__repr__, str.__format__


class Backward:
    """A backward function and how to feed it.

    graph: inputs are one gradient placeholder per differentiable forward output
        (`grad_outputs` gives their forward output positions), then captures.
    forward: the forward with side outputs: same inputs as the forward, returning its
        outputs and then `side_outputs` (the function to run when a gradient will follow).
    capture_sources: per backward capture, (Source.INPUT, k) for the forward function's k-th
        input, (Source.SIDE, k) for its k-th side output, or (Source.VALUE, v) for an outer
        value (equal to ("input", k) and so on: a Source is its name).
    side_outputs: forward tensors the forward function must also return (tensors of
        `forward`'s nodes).
    side_source: per side output, j when it is the forward's own output j, else None.
    input_grads: per forward input: None (no gradient), DenseGrad(j) for backward output j,
        or SlicesGrad(jv, ji, dense_shape) for an IndexedSlices gradient.
    """

    __slots__ = ("graph", "forward", "grad_outputs", "capture_sources", "side_outputs",
                 "side_source", "input_grads")

    def __init__(self, graph, forward, grad_outputs, capture_sources, side_outputs, input_grads,
                 outputs=()):
        """The fields as above; `outputs` are the function's own outputs, which give
        `side_source` (none given: no side output is one of them)."""
        self.graph, self.forward = graph, forward
        self.grad_outputs = list(grad_outputs)
        self.capture_sources = [(Source(kind), v) for kind, v in capture_sources]
        self.side_outputs = list(side_outputs)
        self.input_grads = list(input_grads)
        where = {id(t): j for j, t in reversed(list(enumerate(outputs)))}
        self.side_source = [where.get(id(t)) for t in self.side_outputs]

    @classmethod
    def over(cls, fwd, graph, grad_outputs, input_grads, name, base_name):
        """The Backward of backward `graph` built over forward graph `fwd`: its captures of
        `fwd`'s tensors give the capture sources and side outputs, and the forward with side
        outputs is a view of `fwd` named `name` (`base_name`)."""
        sources, side_outputs = capture_sources(graph, fwd)
        forward = fwd.view(fwd.outputs + side_outputs, name, base_name)
        return cls(graph, forward, grad_outputs, sources, side_outputs, input_grads, fwd.outputs)


class Saving:
    """What differentiating function F from one run of it takes.

    backward: F's Backward. next: the function to run in F's place so that the side
    outputs exist: F itself when every side output is one of F's outputs, else
    `backward.forward` (F's outputs first, so callers keep their output positions).
    side_pos: per side output, its output position in `next`.
    """

    __slots__ = ("backward", "next", "side_pos")

    def __init__(self, backward, next_fn, side_pos):
        self.backward, self.next, self.side_pos = backward, next_fn, side_pos

    def feed(self, inputs, outputs):
        """The backward's capture values: forward `inputs` and the outputs of a run of `next`."""
        out = []
        for kind, v in self.backward.capture_sources:
            out.append(inputs[v] if kind is Source.INPUT else
                       outputs[self.side_pos[v]] if kind is Source.SIDE else v)
        return out


def saving_of(f):
    """The Saving of finalized function `f` (built once, kept in f.derived).

    A function whose Backward is given (`f.derived.backward`, set by a document's loader
    from its gradient record) is differentiated by that one; others get one built from the
    op registry's gradient rules.
    """
    s = f.derived.saving
    if s is None:
        if _depth.n > MAX_NESTING:     # the entry function is level 0
            raise errors.UnimplementedError(
                f"gradients: {f.name!r} is a body nested more than {MAX_NESTING} deep in loops, "
                f"branches or calls; gradients go through at most {MAX_NESTING} levels (each "
                f"loop level stacks its saved values one dimension higher)")
        _depth.n += 1
        try:
            with LOCK:
                s = f.derived.saving
                if s is None:
                    given = f.derived.backward
                    if given is None:
                        bw = build_backward(f)
                        f.derived.backward = (bw, bw.forward)
                    else:
                        bw = given[0]
                    s = saving_from(f, bw)
                    f.derived.saving = s
        finally:
            _depth.n -= 1
    return s


def saving_from(f, bw):
    """The Saving of `f` with Backward `bw` (also for a rematerializing Backward)."""
    if all(j is not None for j in bw.side_source):
        return Saving(bw, f, list(bw.side_source))
    bw.forward.derived.saves_for = f
    n = len(f.outputs)
    return Saving(bw, bw.forward, [n + k for k in range(len(bw.side_outputs))])


def levels_of(f):
    """[f0, f1, ..., f]: the functions `f` was raised through (f_{k+1} saves for f_k)."""
    chain = [f]
    while chain[-1].derived.saves_for is not None:
        chain.append(chain[-1].derived.saves_for)
        if len(chain) > MAX_LEVELS:
            raise RecursionError(f"{f.name}: more than {MAX_LEVELS} levels of side outputs")
    chain.reverse()
    return chain


def pick_level(sizes, grads):
    """The lowest level whose outputs (`sizes[L]` of them) hold every gradient given, or
    None when no gradient is given: its backward is the one to run."""
    top = -1
    for k, g in enumerate(grads):
        if g is not None:
            top = k
    if top < 0:
        return None
    for level, size in enumerate(sizes):
        if top < size:
            return level
    raise ValueError(f"a gradient for output {top}, but the outputs stop at {sizes[-1]}")


def build_backward(forward, name=None):
    """Build the backward function of finalized graph `forward` (w.r.t. all its inputs)."""
    fwd = _working_copy(forward)
    bwd = Graph(name or f"{forward.name}_grad", outer=fwd,
                base_name=f"{forward.base_name}_grad")
    bwd.inline_constants = True
    sources = fwd.all_inputs
    diff_pos = [k for k, t in enumerate(fwd.outputs) if t.dtype.is_inexact]
    tape = tape_mod.Tape(persistent=True)
    for s in sources:
        tape.watch(s)
    for node in list(fwd.nodes):
        if node.op.grad is None or not node.outputs:
            continue
        ids = [t._id for t in node.inputs]
        if not tape.should_record(ids):
            continue
        tape.add(tape_mod.tape_entry(node.op.name, ids, node.outputs, node.op.grad,
                                     node.op.none_grads, node, node.inputs))
    try:
        with bwd.building():
            seeds = [bwd.placeholder(fwd.outputs[k].shape, fwd.outputs[k].dtype) for k in diff_pos]
            targets = [fwd.outputs[k] for k in diff_pos]
            grads = imperative_grad(tape, targets, sources, seeds) if targets else [None] * len(sources)
    finally:
        fwd.finalized = True     # the working copy's function nodes are raised by now
    outputs = []
    input_grads = []
    for g in grads:
        if g is None:
            input_grads.append(None)
        elif isinstance(g, IndexedSlices):
            input_grads.append(SlicesGrad(len(outputs), len(outputs) + 1, g.dense_shape))
            outputs += [_own(bwd, g.values), _own(bwd, g.indices)]
        else:
            input_grads.append(DenseGrad(len(outputs)))
            outputs.append(_own(bwd, g))
    bwd.finalize(outputs)
    return Backward.over(fwd, bwd, diff_pos, input_grads, f"{forward.name}_forward",
                         f"{forward.base_name}_forward")


def capture_sources(bwd, fwd):
    """(capture_sources, side_outputs) of backward graph `bwd` over forward graph `fwd`."""
    pos_of_input = {t._id: k for k, t in enumerate(fwd.all_inputs)}
    side_outputs, side_pos, sources = [], {}, []
    for tid in bwd.capture_order:
        outer, _ = bwd.captures[tid]
        if isinstance(outer, SymbolicTensor) and outer.node.graph is fwd:
            if tid in pos_of_input:
                sources.append((Source.INPUT, pos_of_input[tid]))
                continue
            if tid not in side_pos:
                side_pos[tid] = len(side_outputs)
                side_outputs.append(outer)
            sources.append((Source.SIDE, side_pos[tid]))
        else:
            sources.append((Source.VALUE, outer))
    return sources, side_outputs


def _working_copy(forward):
    """`forward` itself, or (when it is a view, or holds function nodes whose gradients
    raise them in place) an unfinalized copy of its live nodes, with aliases from the
    original's tensors (and those it aliases) to the copy's."""
    if forward.view_of is None and not any(n.op.function_attrs and n.op.grad is not None
                                           for n in forward.nodes):
        return forward
    cp = GraphCopy(forward)
    live = live_node_ids(forward)
    for node in forward.nodes:
        if node.op is not PLACEHOLDER and id(node) in live:
            cp.copy(node)
    g = cp.finish()
    g.finalized = False
    tensors = cp.tensors
    aliases = {}
    for node in forward.nodes:
        if id(node) in live or node.op is PLACEHOLDER:
            for t in node.outputs:
                new = tensors.get(id(t))
                if new is not None:
                    aliases[id(t)] = (t, new)
    for key, (old, mid) in (forward.aliases or {}).items():
        new = tensors.get(id(mid))
        if new is not None:
            aliases[key] = (old, new)
    g.aliases = aliases
    return g


def _own(graph, t):
    """`t` as a tensor of `graph` (a forward tensor passed straight through is captured)."""
    with graph.building():
        return graph.capture(t) if t.node.graph is not graph else t
