"""What `df.nn.X` / `df.math.X` / `df.X` say for a name defun does not have: an
AttributeError that names the df function a TensorFlow user means where there is one."""

import types

# TensorFlow names with another name here (tf.X -> df.Y), by namespace ('' is `df` itself).
TF_NAMES = {
    "": {"function": "df.defun (tf.function's counterpart: `@df.defun`)",
         "numpy_function": "plain numpy on eager tensors (t.numpy()); in a defun, df ops",
         "TensorArray": "a Python list and lst.append(y) in a loop of a defun (AutoGraph stacks it), or df.scan",
         "size_invariants": "nothing: loop variables whose sizes change get unknown sizes by themselves"},
    "nn": {"softmax_cross_entropy_with_logits_v2": "df.nn.softmax_cross_entropy_with_logits",
           "max_pool": "df.nn.max_pool2d", "avg_pool": "df.nn.avg_pool2d"},
    "math": {"div": "df.math.divide", "floor_div": "df.math.floordiv"},
}


def missing_name(module, name, names):
    """The AttributeError for `module.name` (module 'defun' or 'defun.nn', ...)."""
    space = module.rpartition(".")[2] if module != "defun" else ""
    hint = TF_NAMES.get(space, {}).get(name)
    where = f"df.{space}" if space else "df"
    if hint:
        return AttributeError(f"module {module!r} has no attribute {name!r}: use {hint}")
    close = [n for n in names if name.lower() in n.lower() or n.lower() in name.lower()][:5]
    more = f"; similar names in {where}: {', '.join(close)}" if close else ""
    return AttributeError(f"module {module!r} has no attribute {name!r}{more} "
                          f"(the index of every name: docs/api.md)")



class CalledLikeTF(types.ModuleType):
    """The class of the internal module `defun.function`, which `df.function` reaches (every
    submodule is an attribute of its package): calling it, as `@df.function` written by a
    TensorFlow user does, says to use `@df.defun` instead of numpy's "'module' object is not
    callable"."""

    def __call__(self, *args, **kwargs):
        raise TypeError("df.function is not TensorFlow's tf.function: decorate with @df.defun "
                        "(df.defun(f, input_signature=..., autograph=...) takes tf.function's arguments)")
