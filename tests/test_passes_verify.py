"""verify(): valid graphs pass; hand-corrupted graphs fail with a message naming the node and the fix."""
import numpy as np
import pytest

import defun as df
from graph_helpers import F32, F64, I32, build
from defun.graph.functions import call_graph
from defun.graph.ir import Graph
from defun.graph.printer import format_node
from defun.graph.verify import VerifyError, verify
from defun.runtime import attr_types
from defun.runtime.attr_types import check as check_attr
from defun.runtime import errors, registry
from defun.runtime.registry import OpDef


# ---------------------------------------------------------------------------------------
# verify: valid graphs pass, hand-corrupted graphs fail naming the node and the fix

def test_verify_accepts_graphs_built_by_tracing():
    v = df.Variable(np.ones((2, 2), np.float32))
    g = build("f", [((None, 2), F32), ((3,), I32)],
              lambda x, i: [df.split(x @ v.read_value(), 2, axis=1)[0], df.reduce_max(i),
                            x[:, 1:], df.concat([x, x], axis=0)])
    assert verify(g) is g


def _victim():
    return build("f", [((None, 3), F32)], lambda x: df.reduce_sum(df.tanh(x) * 2.0, axis=1))


def _corrupt_order(g):
    g.nodes[2], g.nodes[3] = g.nodes[3], g.nodes[2]
    return g.nodes[2], "defined after this node"


def _corrupt_cycle(g):
    tanh, mul = g.nodes[1], g.nodes[3]
    tanh.inputs = [mul.outputs[0]]
    return tanh, "depends on itself through the cycle %"


def _corrupt_stray_placeholder(g):
    with g.building():
        t = g._placeholder((2,), F32, None)
    return t.node, "neither an argument nor a capture"


def _corrupt_unknown_op(g):
    n = g.nodes[2]
    n.op = OpDef("mystery_tanh", np.tanh, n.op.infer)
    return n, "'mystery_tanh' is not the registered op"


def _corrupt_attr_name(g):
    n = g.nodes[-1]
    n.attrs["axes"] = (1,)
    return n, "attr 'axes' is not declared by op 'reduce_sum'"


def _corrupt_attr_type(g):
    n = g.nodes[-1]
    n.attrs["keepdims"] = "no"
    return n, "attr 'keepdims' should be True or False"


def _corrupt_attr_list(g):
    with g.building():
        r = df.reshape(g.outputs[0], (-1, 1))
    r.node.attrs["shape"] = [-1, 1]
    return r.node, "attr 'shape' should be a tuple of ints"


def _corrupt_shape(g):
    n = g.nodes[1]
    n.outputs[0].shape = (None, 4)
    return n, "recorded as f32[?,4] but its inputs give f32[?,3]"


def _corrupt_dtype(g):
    n = g.nodes[1]
    n.outputs[0].dtype = F64
    return n, "recorded as f64[?,3]"


def _corrupt_inference(g):
    n = g.nodes[-1]
    n.attrs["axis"] = 5
    return n, "shape inference fails"


def _corrupt_output_count(g):
    with g.building():
        parts = df.split(g.inputs[0], 3, axis=1)
    node = parts[0].node
    node.outputs.pop()
    return node, "it has 2 outputs, op 'split' makes 3"


def _corrupt_output_index(g):
    n = g.nodes[1]
    n.outputs[0].index = 1
    return n, "output 0 does not point back at this node"


def _corrupt_output_owner(g):
    n = g.nodes[3]
    n.outputs[0].node = g.nodes[1]
    return n, "output 0 does not point back at this node"


def _corrupt_output_object(g):
    n = g.nodes[1]
    n.outputs[0] = df.constant(np.zeros(3, np.float32))
    return n, "output 0 does not point back at this node"


def _corrupt_foreign_input(g):
    other = build("other", [((None, 3), F32)], df.exp)
    n = g.nodes[2]
    n.inputs = [other.outputs[0]]
    return n, "produced outside this function"


def _corrupt_foreign_output(g):
    other = build("other", [((None,), F32)], df.exp)
    g.outputs = [other.outputs[0]]
    return None, "output 0 (%1) is not a tensor of this function"


def _corrupt_duplicate_id(g):
    g.nodes[3].id = g.nodes[2].id
    return g.nodes[3], "its id 2 is also used by an earlier node"


def _corrupt_stale_tensor(g):
    from defun.graph.nodes import SymbolicTensor
    n = g.nodes[3]
    old = n.inputs[0]
    n.inputs = [SymbolicTensor(old.node, 0, old.shape, old.dtype), n.inputs[1]]
    return n, "input 0 (%1) is not an output of its node"


def _corrupt_control_input(g):
    other = build("other", [((3,), F32)], df.exp)
    g.nodes[2].control_inputs.append(other.nodes[1])
    return g.nodes[2], "control input %1 is not a node of this function"


def _corrupt_callee(g):
    callee = build("callee", [((None, 3), F32)], df.exp)
    callee.nodes[1].attrs["bogus"] = 1
    with g.building():
        call_graph(callee, [g.inputs[0]])
    return callee.nodes[1], "invalid graph @callee"


CORRUPTIONS = [_corrupt_order, _corrupt_cycle, _corrupt_stray_placeholder, _corrupt_unknown_op,
               _corrupt_attr_name, _corrupt_attr_type, _corrupt_attr_list, _corrupt_shape,
               _corrupt_dtype, _corrupt_inference, _corrupt_output_count, _corrupt_output_index,
               _corrupt_output_owner, _corrupt_output_object, _corrupt_foreign_input,
               _corrupt_foreign_output, _corrupt_duplicate_id, _corrupt_stale_tensor,
               _corrupt_control_input, _corrupt_callee]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=[c.__name__[9:] for c in CORRUPTIONS])
def test_verify_rejects_corrupted_graphs(corrupt):
    g = _victim()
    verify(g)
    node, expected = corrupt(g)
    with pytest.raises(VerifyError) as info:
        verify(g)
    msg = str(info.value)
    assert isinstance(info.value, errors.InvalidArgumentError)
    assert expected in msg
    if node is not None:
        assert format_node(node) in msg               # prints the failing node
    assert msg.rstrip().endswith(tuple("abcdefghijklmnopqrstuvwxyz)")) and ". " in msg  # a fix


GRAPH = object()       # stands for a function Graph in ATTR_EXAMPLES

ATTR_EXAMPLES = {
    "int": ([0, -3, np.int64(2)], [True, 1.0, "1", None]),
    "float": ([0.5, 2, np.float32(1.5)], [False, "1.0", None]),
    "bool": ([True, False, np.bool_(True)], [1, 0, "yes", None]),
    "str": (["CONSTANT", ""], [b"x", 1]),
    "ints": [((), (1, -1), (np.int32(2),)), ([1, 2], (1.0,), (True,), None, 1)],
    "shape": [((), (2, None), (0,)), ((-1,), [2], (2.0,), None)],
    "dtype": ([F32, df.int64], ["float32", np.float32, None]),
    "tensor": ([np.zeros(2, np.float32), np.array(True), np.zeros(2, np.complex64)],
               [np.array(["a"]), np.zeros(2, np.longdouble), [1.0], 1.0]),
    "func": ([GRAPH], [None, "f", lambda x: x]),
    "funcs": ([(), (GRAPH, GRAPH)], [[GRAPH], (GRAPH, None)]),
    "opt_int": ([None, 3], [1.5, True, (1,)]),
    "opt_ints": ([None, 1, (0, 1), ()], [[0, 1], 1.0, (None,)]),
    "transient": ([None, object(), lambda: 0], []),
    "slices": ([(), (0, slice(None, 2), None, Ellipsis, slice(1, None, -1))],
               [[0], (slice(0.5, 2),), ("a",), 0]),
    "dtypes": ([(), (F32, I32)], [[F32], ("float32",), F32]),
}


@pytest.mark.parametrize("kind", sorted(registry.ATTR_TYPES))
def test_attr_checkers(kind):
    graph = Graph("callee")
    choices = attr_types.choices(kind)   # an enumerated string type: its values, then others
    good, bad = (list(choices), ["", "not one of them", 1, None]) if choices else ATTR_EXAMPLES[kind]

    def sub(v):
        if v is GRAPH:
            return graph
        if isinstance(v, (tuple, list)):
            return type(v)(graph if x is GRAPH else x for x in v)
        return v
    for v in good:
        assert check_attr(kind, sub(v)), (kind, v)
    for v in bad:
        assert not check_attr(kind, sub(v)), (kind, v)
    atype = attr_types.TYPES[kind]      # one row per type: check, words, and the JSON codec
    assert atype.expected and (kind == "transient" or (atype.encode and atype.decode))
