"""`df.random`: stateless random numbers, reproducible from a seed of two ints.

    z = df.random.normal([2, 3], seed=(1, 2))
    u = df.random.uniform([4], seed=step_seed, minval=-1.0, maxval=1.0)
"""
from defun.runtime.ops.random_ops import normal, uniform  # noqa: F401

__all__ = ["normal", "uniform"]
