"""`df.debugging`: checks that help find where a computation goes wrong.

    y = df.debugging.check_numerics(df.log(x), "log of the inputs")
"""
from runtime.ops.debug_ops import check_numerics  # noqa: F401

__all__ = ["check_numerics"]
