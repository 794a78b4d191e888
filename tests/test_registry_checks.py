"""A row declared wrongly is refused when it is made, naming the op and the field."""
import re

import numpy as np
import pytest

from defun.runtime.registry import OpDef


def _row(**fields):
    return OpDef("bad_row", np.negative, lambda shapes, dts, attrs: [(shapes[0], dts[0])],
                 **{"num_inputs": 1, **fields})


@pytest.mark.parametrize("fields, message", [
    ({"attrs": {"axis": "no_such_type"}}, "attr 'axis' has unknown type 'no_such_type'"),
    ({"attrs": {"axis": "int"}, "defaults": {"keepdims": False}}, "default for undeclared attr 'keepdims'"),
    ({"onnx": 3}, "onnx must be an ONNX op name or a form function, got 3"),
    ({"batch": 3}, "batch must be a batching rule or a reason string, got 3"),
    ({"num_inputs": -1}, "num_inputs must be an int >= 0 or None"),
])
def test_a_wrong_row_is_refused_naming_the_op_and_the_field(fields, message):
    with pytest.raises(ValueError, match=re.escape(f"op 'bad_row': {message}")):
        _row(**fields)


def test_a_right_row_keeps_what_it_declares():
    row = _row(attrs={"axis": "int", "keepdims": "bool"}, defaults={"keepdims": False},
               onnx="Neg", batch="no rule: a test row")
    assert row.attrs == {"axis": "int", "keepdims": "bool"} and row.defaults == {"keepdims": False}
    assert row.required_attrs == frozenset(["axis"]) and row.onnx == "Neg"
    assert row.batch == "no rule: a test row"
