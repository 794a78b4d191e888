"""GraphCopy: a new graph built from an old one node by node (what every pass is made of).

The copy keeps the calling convention (placeholders, captures), node ids and source sites,
and remembers where each old tensor went, so a pass only says what changes.
"""
import itertools

import numpy as np

from defun.runtime import dtypes, numerics, registry
from defun.graph.ir import Graph
from defun.graph.nodes import CONST, PLACEHOLDER
from defun.graph.verify import VerifyError

__all__ = ["GraphCopy"]

_IDENTITY = registry.get("identity")


class GraphCopy:
    """A new graph built from `old` node by node, remembering where old tensors went.

    The constructor copies the placeholders (same order, types, handle data, capture keys);
    a pass then walks `old.nodes` calling `copy(node)`, `replace(node, tensors)` or `emit(...)`,
    and `finish()` sets the outputs. Copies keep node ids; new nodes get ids after the largest.
    """

    def __init__(self, old):
        self.old = old
        new = self.graph = Graph(old.name, outer=old.outer, base_name=old.base_name)
        new._ids = itertools.count(max((n.id for n in old.nodes), default=-1) + 1)
        self.tensors = {}       # id(old tensor) -> new tensor
        self.stands_for = {}    # id(old node) -> new nodes that replace it as a control input
        for t in old.inputs:
            new.inputs.append(self._copy_placeholder(t))
        for key in old.capture_order:
            outer_value, ph = old.captures[key]
            new.captures[key] = (outer_value, self._copy_placeholder(ph))
            new.capture_order.append(key)

    def _copy_placeholder(self, t):
        node = self.emit(PLACEHOLDER, (), dict(t.node.attrs), [(t.shape, t.dtype)], t.node.site,
                         node_id=t.node.id)
        out = node.outputs[0]
        out.handle_data = t.handle_data
        self.tensors[id(t)] = out
        self.stands_for[id(t.node)] = (node,)
        return out

    # -------------------------------------------------------------- mapping
    def inputs_of(self, node):
        """The new tensors standing for `node`'s inputs."""
        tensors = self.tensors
        return [tensors[id(t)] for t in node.inputs]

    def controls_of(self, node):
        """The new nodes standing for `node`'s control inputs (deduplicated, in order)."""
        if not node.control_inputs:
            return []
        out = []
        for c in node.control_inputs:
            for n in self.stands_for.get(id(c), ()):
                if n not in out:
                    out.append(n)
        return out

    # -------------------------------------------------------------- building
    def emit(self, op, inputs, attrs, out_types, site=None, control_inputs=(), node_id=None):
        """A new node of the copy (`node_id`: keep an old node's id; default a fresh one)."""
        return self.graph._new_node(op, list(inputs), attrs, out_types, site, control_inputs,
                                    node_id)

    def emit_const(self, value, site=None, node_id=None):
        """A const node holding a read-only copy of `value`; returns its tensor."""
        arr = np.array(value, copy=True)
        arr.flags.writeable = False
        node = self.emit(CONST, (), {"value": arr}, [(arr.shape, dtypes.from_numpy(arr.dtype))],
                         site, node_id=node_id)
        return node.outputs[0]

    def copy(self, node, inputs=None, keep_id=True, extra_controls=()):
        """Copy `node` (with `inputs`, default its mapped inputs); returns the new node.

        `keep_id=False` gives the copy a fresh id (inlined nodes, whose ids are the callee's).
        """
        tensors = self.tensors
        if inputs is None:
            inputs = [tensors[id(t)] for t in node.inputs]
        else:
            inputs = list(inputs)
        controls = self.controls_of(node) if node.control_inputs else []
        for c in extra_controls:
            if c not in controls:
                controls.append(c)
        new = self.graph._new_node(node.op, inputs, dict(node.attrs),
                                   [(t.shape, t.dtype) for t in node.outputs], node.site, controls,
                                   node.id if keep_id else None)
        if not keep_id:     # under a new id (inlined): still the gradient it was (check numerics)
            numerics.carry_backward(node.graph.name, node.id, self.graph.name, new.id)
        # what replace(node, new.outputs, (new,)) does, inline: copying is most of a pass
        for old, t in zip(node.outputs, new.outputs):
            tensors[id(old)] = t
        self.stands_for[id(node)] = (new,)
        return new

    def replace(self, node, tensors, stands_for=None):
        """Make `node`'s outputs stand for `tensors` (new-graph tensors) from now on."""
        for old, new in zip(node.outputs, tensors):
            self.tensors[id(old)] = new
        if stands_for is None:
            stands_for = []
            for t in tensors:
                if t.node not in stands_for:
                    stands_for.append(t.node)
        self.stands_for[id(node)] = tuple(stands_for)

    def finish(self):
        """Set the outputs (same types as the old graph's) and return the new graph."""
        old, new = self.old, self.graph
        outputs = []
        for k, t in enumerate(old.outputs):
            nt = self.tensors[id(t)]
            if nt.dtype is not t.dtype:
                raise VerifyError(f"pass bug: output {k} of @{old.name} changed dtype from "
                                  f"{t.dtype.name} to {nt.dtype.name}")
            if tuple(nt.shape) != tuple(t.shape):
                # keep the signature's static shape (e.g. an inlined function returned an
                # argument whose shape is known more or less precisely than its result's)
                nt = self.emit(_IDENTITY, (nt,), {}, [(t.shape, t.dtype)], t.node.site).outputs[0]
            outputs.append(nt)
        new.outputs = outputs
        new.finalized = old.finalized
        new.structured_outputs = old.structured_outputs
        return new
