"""Operand conversion: how an op's inputs that are not tensors become tensors (weak typing).

One routine for both modes (the eager dispatcher and a graph being traced make different
tensors of the arrays, nothing else differs), so `df.add(1.5, np.array([1., 2.]))` is
float64 eagerly and traced alike.

Among the inputs that must share a dtype (`op.same_dtype`), the first *strong* one (a tensor
or a numpy array/scalar) gives the dtype the weak ones (Python numbers, lists) adopt; with
none, the first weak one converted gives it to the rest (`1.5 + 2` is float32). Inputs
outside `same_dtype` convert on their own (Python floats to float32, ints to int32).

A (nested) Python list holding tensors is packed with `df.stack`, a differentiable op, so
`df.reduce_sum([x, 2.0 * x])` keeps its gradient (as TensorFlow packs such lists); its
Python numbers adopt the dtype of its first tensor. `df.convert_to_tensor` packs the same way.
"""
import numpy as np

from defun.runtime import errors

__all__ = ["convert_operands", "holds_tensor", "first_dtype", "pack_list", "install_stack"]

# df.stack, installed by runtime.ops.array_ops (which is built on the dispatch that uses this
# module, so it cannot be imported here)
_stack = None


def install_stack(stack):
    """Give this module the `stack(values)` function lists of tensors are packed with."""
    global _stack
    _stack = stack


def _tensorish(v, is_tensor):
    return is_tensor(v) or (hasattr(v, "_as_tensor") and not isinstance(v, (list, tuple)))


def holds_tensor(value, is_tensor):
    """True if the (nested) list or tuple `value` holds a tensor or a variable."""
    for v in value:
        if isinstance(v, (list, tuple)):
            if holds_tensor(v, is_tensor):
                return True
        elif _tensorish(v, is_tensor):
            return True
    return False


def first_dtype(value, is_tensor):
    """The numpy dtype of the first tensor (or variable) in a nested list, else None."""
    for v in value:
        if isinstance(v, (list, tuple)):
            d = first_dtype(v, is_tensor)
            if d is not None:
                return d
        elif _tensorish(v, is_tensor):
            return (v if is_tensor(v) else v._as_tensor()).dtype.np
    return None


def pack_list(value, dtype, is_tensor, make):
    """One tensor for a (nested) list holding tensors: its entries (tensors as they are,
    variables read, Python numbers and lists as `make(x, dtype)`, `dtype` defaulting to the
    first tensor's) stacked with df.stack, so gradients flow to each tensor."""
    if dtype is None:
        dtype = first_dtype(value, is_tensor)
    parts = []
    for v in value:
        if isinstance(v, (list, tuple)) and holds_tensor(v, is_tensor):
            parts.append(pack_list(v, dtype, is_tensor, make))
        elif is_tensor(v):
            parts.append(v)
        elif hasattr(v, "_as_tensor") and not isinstance(v, (list, tuple)):
            parts.append(v._as_tensor())
        else:
            parts.append(make(v, dtype))
    return _stack(parts)


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
        if isinstance(x, (list, tuple)) and holds_tensor(x, is_tensor):
            target = first_dtype(x, is_tensor)
            break
    out = list(inputs)
    for i, x in enumerate(out):
        if is_tensor(x):
            continue
        in_same = i in same
        try:
            if isinstance(x, (list, tuple)) and holds_tensor(x, is_tensor):
                t = pack_list(x, target if in_same else None, is_tensor, make)
            else:
                t = make(x, target if in_same else None)
        except errors.InvalidArgumentError as e:
            raise errors.InvalidArgumentError(f"{op.name}: input {i}: {e}") from None
        except TypeError as e:
            raise TypeError(f"{op.name}: input {i}: {e}") from None
        out[i] = t
        if target is None and in_same:
            target = t.dtype.np
    return out
