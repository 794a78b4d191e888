"""Op rows: stateless random numbers and dropout, against a per-entry reference.

The reference regenerates the numbers from the seed with numpy's Philox (the same
counter-based bit generator the kernels key with the seed) one value at a time, following
the recipe of runtime/ops/random_ops.py's docstring with Python's math module, so the
vectorized kernels are checked against a plain reading of that recipe.
"""
import math

import numpy as np

import defun as df
from opcheck import A, Row, V, idx

__all__ = ["ROWS", "ref_words", "ref_uniform", "ref_normal", "ref_dropout"]

f16, f32, f64, i64 = df.float16, df.float32, df.float64, df.int64


def ref_words(seed, n):
    key = np.array([int(s) % 2 ** 64 for s in np.asarray(seed).tolist()], np.uint64)
    return [int(w) for w in np.random.Philox(key=key).random_raw(n)]


def ref_uniform(seed, n, dtype=np.float32):
    """Value k: float64 from word k's top 53 bits; float32/float16 from the top 24/11 bits of
    word k // 2's low (k even) or high (k odd) 32-bit half."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return np.array([(w >> 11) * 2.0 ** -53 for w in ref_words(seed, n)])
    bits = 24 if dtype == np.float32 else 11
    words = ref_words(seed, (n + 1) // 2)
    out = []
    for k in range(n):
        half = words[k // 2] & 0xFFFFFFFF if k % 2 == 0 else words[k // 2] >> 32
        out.append((half >> (32 - bits)) * 2.0 ** -bits)
    return np.array(out, dtype)


def ref_normal(seed, n):
    """Box-Muller on words (2p, 2p + 1): cos for even k = 2p, sin for odd k = 2p + 1."""
    words = ref_words(seed, 2 * ((n + 1) // 2))
    out = []
    for k in range(n):
        p = k // 2
        u1, u2 = (words[2 * p] >> 11) * 2.0 ** -53, (words[2 * p + 1] >> 11) * 2.0 ** -53
        r = math.sqrt(-2.0 * math.log(1.0 - u1))
        out.append(r * (math.cos if k % 2 == 0 else math.sin)(2.0 * math.pi * u2))
    return np.array(out)


def _normal_ref(seed, shape, dtype=f32, mean=0.0, stddev=1.0):
    n = int(np.prod(shape))
    return (mean + stddev * ref_normal(seed, n).reshape(shape)).astype(dtype.np)


def _uniform_ref(seed, shape, dtype=f32, minval=0.0, maxval=1.0):
    n = int(np.prod(shape))
    u = ref_uniform(seed, n, dtype.np).astype(np.float64).reshape(shape)
    return (minval + (maxval - minval) * u).astype(dtype.np)


def ref_dropout(x, seed, rate, noise_shape=None):
    """Keep where the float32 uniform of the mask position is >= rate; scale by 1/(1-rate)."""
    if rate == 0:
        return x.copy()
    ns = [None] * x.ndim if noise_shape is None else list(noise_shape)
    mask_shape = tuple(d if n is None else n for n, d in zip(ns, x.shape))
    u = ref_uniform(seed, int(np.prod(mask_shape)), np.float32).reshape(mask_shape)
    keep = u >= np.float32(rate)
    return np.where(keep, x.astype(np.float64) * (1.0 / (1.0 - rate)), 0.0).astype(x.dtype)


def _normal(seed, **kw):
    return df.random.normal(seed=seed, **kw)


def _uniform(seed, **kw):
    return df.random.uniform(seed=seed, **kw)


def _dropout(x, seed, **kw):
    return df.dropout(x, seed=seed, **kw)


ROWS = [
    Row("stateless_random_normal", _normal, _normal_ref,
        [V([idx([1, 2])], dict(shape=[3, 4])), V([idx([-5, 2 ** 40], i64)], dict(shape=[7], dtype=f64)),
         V([idx([0, 0])], dict(shape=[2, 0, 3])), V([idx([3, 4])], dict(shape=[], dtype=f16)),
         V([idx([1, 2])], dict(shape=(5,), mean=2.0, stddev=0.5)),
         V([idx([9, 1])], dict(shape=np.array([2, 3]), dtype=f64, stddev=3))],
        (None,), grad=False),
    Row("stateless_random_uniform", _uniform, _uniform_ref,
        [V([idx([1, 2])], dict(shape=[3, 4])), V([idx([-5, 2 ** 40], i64)], dict(shape=[7], dtype=f64)),
         V([idx([0, 0])], dict(shape=[0])), V([idx([3, 4])], dict(shape=[5], dtype=f16)),
         V([idx([1, 2])], dict(shape=[2, 3], minval=-2.0, maxval=3.0)),
         V([idx([2, 1])], dict(shape=[1], dtype=f64, minval=1, maxval=2))],
        (None,), grad=False),
    Row("dropout", _dropout, ref_dropout,
        [V([A((4, 5)), idx([1, 2])], dict(rate=0.5)),
         V([A((2, 3, 4)), idx([7, 7], i64)], dict(rate=0.25, noise_shape=[2, 1, 4])),
         V([A((3,)), idx([1, 2])], dict(rate=0.0)),
         V([A(()), idx([5, 6])], dict(rate=0.3)),
         V([A((2, 3)), idx([0, 1])], dict(rate=0.9, noise_shape=[None, 1])),
         V([A((6, 2)), idx([-3, 11])], dict(rate=0.5, noise_shape=(6, None)))],
        second=True),
]
