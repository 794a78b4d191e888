"""Operand conversion: how an op's inputs that are not tensors become tensors (weak typing).

One routine for both modes (the eager dispatcher and a graph being traced make different
tensors of the arrays, nothing else differs), so `df.add(1.5, np.array([1., 2.]))` is
float64 eagerly and traced alike.

Among the inputs that must share a dtype (`op.same_dtype`), the first *strong* one (a tensor
or a numpy array/scalar) gives the dtype the weak ones (Python numbers, lists) adopt; with
none, the first weak one converted gives it to the rest (`1.5 + 2` is float32). Inputs
outside `same_dtype` convert on their own (Python floats to float32, ints to int32).
"""
import numpy as np

from runtime import errors

__all__ = ["convert_operands"]


def convert_operands(op, inputs, is_tensor, make):
    """`inputs` of `op` with each operand `is_tensor` rejects replaced by `make(x, dtype)`, a
    tensor of `runtime.tensor.to_array(x, dtype)` (dtype: the np.dtype it adopts, or None);
    a failure names the op and the input."""
    same = op.same_dtype or ()
    target = None
    for i in same:
        x = inputs[i]
        if is_tensor(x):
            target = x.dtype.np
            break
        if isinstance(x, (np.ndarray, np.generic)):
            target = x.dtype
            break
    out = list(inputs)
    for i, x in enumerate(out):
        if is_tensor(x):
            continue
        in_same = i in same
        try:
            t = make(x, target if in_same else None)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{op.name}: input {i}: {e}") from None
        except TypeError as e:
            raise TypeError(f"{op.name}: input {i}: {e}") from None
        out[i] = t
        if target is None and in_same:
            target = t.dtype.np
    return out
