"""Helpers of the AutoGraph reference tests (tests/test_autograph_reference*.py): run a
function through df.defun and eagerly, compare, and the input kinds they take."""
import contextlib
import itertools

import numpy as np
import pytest

import defun as df


def _product(*parts, repeat=1):
    return list(itertools.product(*parts, repeat=repeat))


def tensor(v):
    return df.constant(v, df.int32)


def same(got, want):
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(want)
        for k in want:
            same(got[k], want[k])
    elif want is None:
        assert got is None
    else:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def matches_eager(fn, *args):
    same(df.defun(fn)(*args), fn(*args))


def refused(fn, *args, match=None):
    with pytest.raises(df.errors.TracingError, match=match):
        df.defun(fn)(*args)


KINDS = {"py": lambda v: v, "tensor": tensor}
scope = contextlib.nullcontext        # tf.name_scope('') has no df counterpart: a plain context


