"""`df.nn`: neural-network functions under TensorFlow's `tf.nn` names, so `tf.nn.X` code
runs with `df.nn.X`. Each name is a df op (the same function as `df.X` where df has one)
or a composition of df ops (runtime/ops/composites.py); gradients, vmap and exports work on
all of them.

    import defun as df
    loss = df.reduce_mean(df.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z))
"""
from defun.runtime.ops.composites import (bias_add, l2_loss, l2_normalize, log_sigmoid, moments,  # noqa: F401
                                          relu6, selu, sigmoid_cross_entropy_with_logits, silu, softsign,
                                          weighted_cross_entropy_with_logits)
from defun.runtime.ops.conv_ops import conv2d  # noqa: F401
from defun.runtime.ops.pool_ops import avg_pool2d, max_pool2d  # noqa: F401
from defun.runtime.ops.math_ops import relu, sigmoid, tanh  # noqa: F401
from defun.runtime.ops.nn_ops import (log_softmax, softmax, softmax_cross_entropy_with_logits,  # noqa: F401
                                      sparse_softmax_cross_entropy_with_logits)
from defun.runtime.ops.random_ops import dropout  # noqa: F401
from defun.runtime.ops.sort_ops import top_k  # noqa: F401
from defun.runtime.ops.special_math_ops import elu, gelu, leaky_relu, softplus  # noqa: F401
from defun.namespaces import missing_name

swish = silu

__all__ = sorted(n for n in dir() if not n.startswith("_") and n != "missing_name")


def __getattr__(name):
    raise missing_name(__name__, name, __all__)
