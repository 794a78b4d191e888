"""AutoGraph gaps found by running TensorFlow's own reference tests through
tests/tf_reference (each compared with the same Python run eagerly)."""
import pytest

import defun as df
from autograph_reference_helpers import matches_eager, tensor


def _raises():
    raise ValueError("used for control flow")


def return_of_a_call_that_raises():
    try:
        return _raises()
    except ValueError:
        pass
    return 1


def return_that_raises_after_a_tensor_if(c):
    if c:
        return 2
    try:
        return _raises()
    except ValueError:
        pass
    return 1


def test_a_return_whose_value_raises_has_not_returned():
    # the returned value is computed before the function counts as returned: the
    # `except` that catches its error goes on to the next return, as in Python
    matches_eager(return_of_a_call_that_raises)
    for c in (True, False):
        matches_eager(return_that_raises_after_a_tensor_if, tensor(c))
        matches_eager(return_that_raises_after_a_tensor_if, c)
