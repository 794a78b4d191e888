"""AutoGraph: Python `if`/`while`/`for` (and `break`, `continue`, `return`, `and`/`or`/`not`,
conditional expressions, `assert`, `print`) on tensors inside a defun, converted into graph
control flow when the function is first traced (df.defun(f, autograph=True), the default).

    >>> print(df.autograph.to_code(f))      # the converted source of f
"""
from defun.autograph.conversion import to_code, converted, entry_point  # noqa: F401

__all__ = ["to_code"]
