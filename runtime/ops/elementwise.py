"""The elementwise definer: every elementwise op without attrs is declared through `unary` or
`binary`, so each gets the same row (shape rule, batching rule) and the same public function.

The public function is `fast_dispatch.op_function`'s: an op that qualifies (one output, no
attrs, one input or two of one dtype) takes the eager fast path, whichever file declares it.
`fused=` gives the numba backend the op's scalar form (runtime/fused.py), so a numba region
runs through it instead of stopping there.

    sinh = unary("sinh", np.sinh, grad, kinds="f", fused=Elementwise("np.sinh({0})"))
"""
from defun.runtime import batching as bt
from defun.runtime.fast_dispatch import op_function
from defun.runtime.ops import shape_rules
from defun.runtime.registry import register

__all__ = ["unary", "binary", "register_binary"]


def _unary_infer(name, kinds, out_dtype):
    if out_dtype is None:
        return shape_rules.unary_same(name, kinds)

    def infer(shapes, dts, attrs):
        shape_rules.check_kinds(name, dts[0], kinds)
        return [(tuple(shapes[0]), out_dtype)]
    return infer


def unary(name, kernel, grad, kinds=shape_rules.numeric_kinds, out_dtype=None, doc="", fused=None, onnx=None,
          names=None, cost=None):
    """Register one-input op `name` and return its public function `f(x, name=None)` (its
    parameter called `names[0]` if given: TF's name). `out_dtype`: the output's dtype when
    it is not the input's (is_nan: bool)."""
    op = register(
        name=name,
        kernel=kernel,
        infer=_unary_infer(name, kinds, out_dtype),
        grad=grad,
        num_inputs=1,
        attrs={},
        defaults={},
        kinds=kinds,
        fused=fused,
        onnx=onnx,
        batch=bt.elementwise,
        cost=cost,
    )
    return op_function(op, doc or f"Elementwise {name}(x).", names)


def register_binary(name, kernel, grad, kinds=shape_rules.numeric_kinds, out_dtype=None, fused=None, onnx=None,
                    cost=None):
    """The row of two-input op `name` (numpy broadcasting, one dtype), without a public function."""
    return register(
        name=name,
        kernel=kernel,
        infer=shape_rules.binary_broadcast(name, kinds, out_dtype),
        grad=grad,
        num_inputs=2,
        attrs={},
        defaults={},
        same_dtype=(0, 1),
        kinds=kinds,
        fused=fused,
        onnx=onnx,
        batch=bt.elementwise,
        cost=cost,
    )


def binary(name, kernel, grad, kinds=shape_rules.numeric_kinds, out_dtype=None, doc="", fused=None, onnx=None,
           cost=None, names=None):
    """Register two-input op `name` and return its public function `f(x, y, name=None)` (its
    parameters called `names` if given: `atan2(y, x)`)."""
    op = register_binary(name, kernel, grad, kinds, out_dtype, fused, onnx, cost)
    return op_function(op, doc or f"Elementwise {name}(x, y) with numpy broadcasting.", names)
