"""reduce_prod's derivatives without dividing by x (zeros are exact): `reduce_prod_others`
(each element's product of the others in its reduction group, the first derivative) and
its gradient `reduce_prod_others_grad` (the second), internal rows with their ONNX forms."""
import numpy as np

from defun.runtime import batching as bt, errors
from defun.runtime.execute import run_op
from defun.runtime.ops import shape_rules
from defun.runtime.ops._onnx import reduced_axes, running
from defun.runtime.ops.complex_ops import conj
from defun.runtime.registry import register
from defun.runtime.tape import skip_input_indices

__all__ = ["PROD_OTHERS", "PROD_OTHERS_GRAD"]


def _group_last(x, axis):
    """x with the reduced axes moved last and flattened: (kept sizes..., n), plus the undo."""
    axes = tuple(range(x.ndim)) if axis is None else \
        tuple(a % x.ndim for a in (axis if isinstance(axis, tuple) else (axis,)))
    keep = [i for i in range(x.ndim) if i not in axes]
    perm = keep + list(axes)
    xt = np.transpose(x, perm)
    # the group's size, not -1: no size fits when a kept axis is 0 (x [0, 3] reduced over 1)
    flat = xt.reshape(xt.shape[:len(keep)] + (int(np.prod(xt.shape[len(keep):], dtype=np.int64)),))

    def undo(r):
        return np.transpose(r.reshape(xt.shape), np.argsort(perm))
    return flat, undo


def _exclusive_products(flat):
    """out[..., i] = product of flat[..., k] for k != i (no division, so zeros are safe)."""
    if not flat.shape[-1]:      # empty groups: no products (the running ones below have one)
        return flat.copy()
    ones = np.ones(flat.shape[:-1] + (1,), flat.dtype)
    left = np.cumprod(np.concatenate([ones, flat[..., :-1]], -1), -1)
    right = np.cumprod(np.concatenate([ones, flat[..., :0:-1]], -1), -1)[..., ::-1]
    return left * right


def _prod_others_kernel(x, axis):
    """For each element, the product of the other elements in its reduction group."""
    if x.ndim == 0:
        return np.ones_like(x)
    flat, undo = _group_last(x, axis)
    return undo(_exclusive_products(flat)).astype(x.dtype, copy=False)


def _prod_others_grad_kernel(gg, x, axis):
    """VJP of reduce_prod_others: out[j] = sum over i != j of gg[i] * prod(x[k], k not in {i, j})."""
    if x.ndim == 0:
        return np.zeros_like(x)
    flat, undo = _group_last(x, axis)
    gflat = _group_last(gg, axis)[0]
    n = flat.shape[-1]
    # row j of `pair`: x with x[j] replaced by 1, so its exclusive products skip both i and j
    pair = np.repeat(flat[..., None, :], n, axis=-2)
    diag = np.arange(n)
    pair[..., diag, diag] = 1
    both = _exclusive_products(pair)
    both[..., diag, diag] = 0
    return undo(np.einsum("...ji,...i->...j", both, gflat)).astype(x.dtype, copy=False)


def _third_order_prod(op, g):
    # Linear in `gg` with a symmetric matrix (the pair products), so that part of the gradient
    # is the op itself (forward mode needs only it); the part for `x` is a third derivative.
    if 1 not in skip_input_indices(op):
        raise errors.UnimplementedError("reduce_prod: gradients beyond the second order are not implemented")
    return _prod_others_grad(op, g) + [None]


def _prod_others_infer(name):
    def infer(shapes, dts, attrs):
        axis = attrs["axis"]
        if axis is not None and len(shapes[-1]):
            shape_rules.normalize_axes(name, axis if isinstance(axis, tuple) else (axis,), len(shapes[-1]))
        if len(shapes) == 2:
            shape_rules.check_compatible(name, "the gradient", shapes[0], "the input", shapes[1])
        return [(tuple(shapes[-1]), dts[-1])]
    return infer


def _grouped_onnx(e, node, names, fn):
    """fn(flat names, rank) on the inputs with the reduced axes moved last and flattened
    (kept sizes..., n), its result put back in the input's layout."""
    x = node.inputs[-1]
    nd = len(x.shape)
    axes = reduced_axes(node)
    keep = [d for d in range(nd) if d not in axes]
    moved = [e.op("Transpose", t, perm=keep + list(axes)) for t in names]
    shape = e.op("Concat", e.op("Shape", moved[0], start=0, end=len(keep)), e.ints([-1]), axis=0)
    out = fn([e.op("Reshape", t, shape) for t in moved], len(keep) + 1)
    back = e.op("Reshape", out, e.op("Shape", moved[0]))
    return e.op("Transpose", back, perm=[(keep + list(axes)).index(d) for d in range(nd)])


def _products_before_after(e, flat, r, dt):
    """(product of the elements before each one, of those after it) along the last axis."""
    mul = lambda s, v: e.op("Mul", s, v)  # noqa: E731
    return (running(e, [flat], r - 1, r, dt, 1, mul, exclusive=True),
            running(e, [flat], r - 1, r, dt, 1, mul, exclusive=True, reverse=True))


def _prod_others_onnx(e, node, ins):
    """The product of the others: the running product before each element times the one
    after it (no division: zeros are exact)."""
    x = node.inputs[0]
    if not x.shape:
        return e.op("Expand", e.scalar(1, x.dtype), e.ints([]))

    def others(flats, r):
        before, after = _products_before_after(e, flats[0], r, x.dtype)
        return e.op("Mul", before, after)
    return _grouped_onnx(e, node, ins, others)


def _prod_others_grad_onnx(e, node, ins):
    """out_j = sum over i != j of gg_i prod(x_k, k not i, j) = after_j S_j + before_j T_j, where
    S_j = x_(j-1) S_(j-1) + gg_(j-1) before_(j-1) and T the same from the end with `after`:
    two more linear scans."""
    x = node.inputs[1]
    if not x.shape:
        return e.op("Expand", e.scalar(0, x.dtype), e.ints([]))

    def grad(flats, r):
        gg, v = flats
        before, after = _products_before_after(e, v, r, x.dtype)
        affine = lambda s, a, c: e.op("Add", e.op("Mul", s, a), c)  # noqa: E731
        s_ = running(e, [v, e.op("Mul", gg, before)], r - 1, r, x.dtype, 0, affine, exclusive=True)
        t_ = running(e, [v, e.op("Mul", gg, after)], r - 1, r, x.dtype, 0, affine, exclusive=True, reverse=True)
        return e.op("Add", e.op("Mul", after, s_), e.op("Mul", before, t_))
    return _grouped_onnx(e, node, ins, grad)


def _prod_others_grad(op, g):
    """The pair products form a symmetric matrix M(x) (holomorphic in x): a complex x's
    gradient is conj(M(x)) g = M(conj x) g (TF's rule, as `multiply`'s conj)."""
    return [run_op(PROD_OTHERS_GRAD, (g, conj(op.inputs[-1])), op.attrs)]


PROD_OTHERS = register(
    name="reduce_prod_others",
    kernel=_prod_others_kernel,
    infer=_prod_others_infer("reduce_prod_others"),
    grad=_prod_others_grad,
    num_inputs=1,
    attrs={"axis": "opt_ints"},
    defaults={"axis": None},
    onnx=_prod_others_onnx,
    batch=bt.axes("axis"),
)
# Internal: the gradient of reduce_prod_others (second derivative of reduce_prod).
PROD_OTHERS_GRAD = register(
    name="reduce_prod_others_grad",
    kernel=_prod_others_grad_kernel,
    infer=_prod_others_infer("reduce_prod_others_grad"),
    grad=_third_order_prod,
    num_inputs=2,
    attrs={"axis": "opt_ints"},
    defaults={"axis": None},
    onnx=_prod_others_grad_onnx,
    batch=bt.axes("axis"),
)
