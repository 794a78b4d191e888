"""Debugging ops: `print` (stateful: runs whenever its graph runs) and `check_numerics`.

`df.print` is one op whose inputs are the tensors among its arguments; everything else
(strings, numbers, the separators) is baked into a template attr where `{}` stands for
the next tensor and `{{`/`}}` for literal braces. The template is parsed here, not with
`str.format`, so a graph document can only say what to print, never reach attributes.
Output goes to sys.stdout or sys.stderr as they are when the op runs (so redirection and
test capture work), and only to those: a loaded document cannot name a file to write.
Neither op writes terminal control codes: the template's text and the check's message are
written with control characters (but a print's newlines and tabs) and bidirectional
overrides escaped, `\x1b` for ESC, so a document cannot drive the terminal it prints to.
"""
import functools
import math
import sys

import numpy as np

from defun.runtime import errors
from defun.runtime.execute import run_op
from defun.runtime.ops import _args, shape_rules
from defun.runtime.registry import Cost, one_of, register
from defun.runtime.tensor import Tensor
from defun.runtime import batching as bt

__all__ = ["print", "check_numerics"]

_STREAMS = ("stdout", "stderr")
# C0 and C1 controls, DEL, and the bidirectional embeddings, overrides and isolates
_CONTROL = frozenset(map(chr, [*range(0x20), *range(0x7f, 0xa0), *range(0x202a, 0x202f),
                               *range(0x2066, 0x206a)]))


def _visible(text, keep=""):
    """`text` with control characters (except those in `keep`) written as escapes."""
    return "".join(c if c not in _CONTROL or c in keep else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}") for c in text)


# ------------------------------------------------------------------ print
@functools.lru_cache(maxsize=256)
def _split_template(template):
    """The literal pieces around each `{}` of `template` (one more piece than tensors)."""
    pieces, cur, i, n = [], [], 0, len(template)
    while i < n:
        ch = template[i]
        nxt = template[i + 1] if i + 1 < n else ""
        if ch == "{" and nxt == "}":
            pieces.append("".join(cur))
            cur = []
            i += 2
        elif ch in "{}" and nxt == ch:
            cur.append(ch)
            i += 2
        elif ch in "{}":
            raise errors.InvalidArgumentError(
                f"print: the template has a lone {ch!r} at position {i}; tensors are '{{}}', "
                f"literal braces are doubled")
        else:
            cur.append(ch)
            i += 1
    pieces.append("".join(cur))
    return tuple(pieces)


def _escape(text):
    return text.replace("{", "{{").replace("}", "}}")


def _format_tensor(value, summarize):
    """numpy's layout with at most `summarize` entries at each end of every dimension
    (all of them when summarize is -1)."""
    if value.ndim == 0:
        return str(value)
    threshold = sys.maxsize if summarize < 0 else 0
    return np.array2string(value, threshold=threshold, edgeitems=max(summarize, 0), separator=" ")


def _print_infer(shapes, dts, attrs):
    pieces = _split_template(attrs["template"])
    if len(pieces) - 1 != len(shapes):
        raise errors.InvalidArgumentError(
            f"print: the template has {len(pieces) - 1} tensor places but the op has "
            f"{len(shapes)} inputs")
    if attrs["output_stream"] not in _STREAMS:
        raise errors.InvalidArgumentError(
            f"print: output_stream must be 'stdout' or 'stderr', got {attrs['output_stream']!r}")
    if attrs["summarize"] < -1:
        raise errors.InvalidArgumentError(
            f"print: summarize must be -1 (everything) or >= 0, got {attrs['summarize']}")
    return []


def _print_kernel(*values, template, summarize, output_stream):
    pieces = _visible_pieces(template)
    if len(pieces) - 1 != len(values):
        _print_infer([np.shape(v) for v in values], [None] * len(values),
                     {"template": template, "summarize": summarize, "output_stream": output_stream})
    parts = [pieces[0]]
    for v, piece in zip(values, pieces[1:]):
        parts.append(_format_tensor(v, summarize))
        parts.append(piece)
    stream = sys.stdout if output_stream == "stdout" else sys.stderr
    stream.write("".join(parts))


def _print_work(shapes, out_shapes, attrs):
    """numpy formats some 50 microseconds per entry: counted as 50,000 operations each."""
    k = attrs["summarize"]
    return 50_000 * sum(math.prod(s) if k < 0 else math.prod(min(d, 2 * k) for d in s) for s in shapes)


@functools.lru_cache(maxsize=256)
def _visible_pieces(template):
    return [_visible(p, "\n\t") for p in _split_template(template)]


_PRINT = register(
    name="print",
    kernel=_print_kernel,
    infer=_print_infer,
    grad=None,
    num_inputs=None,
    attrs={"template": "str", "summarize": "int", "output_stream": one_of(*_STREAMS)},
    defaults={"summarize": 3, "output_stream": "stdout"},
    num_outputs=0,
    stateful=True,
    batch=bt.elementwise,
    cost=Cost(work=_print_work),
)


def _stream_name(stream):
    if stream is None:
        return "stdout"
    if isinstance(stream, str) and stream in _STREAMS:
        return stream
    if stream is sys.stdout or stream is sys.__stdout__:
        return "stdout"
    if stream is sys.stderr or stream is sys.__stderr__:
        return "stderr"
    raise errors.InvalidArgumentError(
        f"print: output_stream must be sys.stdout or sys.stderr (or 'stdout' / 'stderr'), got "
        f"{stream!r}")


def _is_tensor_value(v):
    """A value printed when the op runs (a tensor, an array, a variable; numbers an autograph
    `if` joined, which are known only then)."""
    return isinstance(v, (Tensor, np.ndarray, np.generic)) or hasattr(v, "_as_tensor") or hasattr(v, "_weak_tensor")


def print(*values, summarize=3, output_stream=None, sep=" ", end="\n", name=None):  # noqa: A001
    """Print `values` when the op runs: eagerly at once; in a defun, on every call of the graph
    (a stateful op: kept in program order, never pruned, exported). Tensors show at most
    `summarize` entries at each end of every dimension (-1 or None: all); strings print as is;
    lists, tuples and dicts are shown with their tensors inside. `output_stream` is
    sys.stdout (the default, None) or sys.stderr, as they are when the op runs. Returns None.

    >>> df.print("x:", df.constant([1, 2, 3]))
    x: [1 2 3]
    """
    summarize = -1 if summarize is None else _args.int_arg("print", summarize, "summarize")
    tensors = []

    def place(v):
        if isinstance(v, str):
            return _escape(v)
        if _is_tensor_value(v):
            tensors.append(v)
            return "{}"
        if isinstance(v, (list, tuple)):
            inner = ", ".join(place(e) for e in v)
            if isinstance(v, tuple):
                return "(" + inner + ("," if len(v) == 1 else "") + ")"
            return "[" + inner + "]"
        if isinstance(v, dict):
            return "{{" + ", ".join(f"{_escape(repr(k))}: {place(e)}" for k, e in v.items()) + "}}"
        return _escape(str(v))
    template = _escape(sep).join(place(v) for v in values) + _escape(end)
    attrs = {"template": template, "summarize": summarize, "output_stream": _stream_name(output_stream)}
    _print_infer([()] * len(tensors), None, attrs)
    run_op(_PRINT, tensors, attrs, name)


# ------------------------------------------------------------------ check_numerics
def _check_numerics_kernel(x, message):
    if not np.isfinite(x).all():
        nan = int(np.isnan(x).sum())
        inf_count = int(np.isinf(x).sum())
        first = np.unravel_index(int(np.flatnonzero(~np.isfinite(x))[0]), x.shape)
        where = f" (the first at index {list(map(int, first))})" if x.ndim else ""
        raise errors.InvalidArgumentError(
            f"check_numerics: {_visible(message)}: the tensor ({x.dtype.name}, shape {list(x.shape)}) has "
            f"{nan} NaN and {inf_count} Inf values{where}")
    return x


def _check_numerics_grad(op, g):
    return [run_op(_CHECK_NUMERICS, (g,), {"message": f"{op.attrs['message']} (in the gradient)"})]


_CHECK_NUMERICS = register(
    name="check_numerics",
    kernel=_check_numerics_kernel,
    infer=shape_rules.unary_same("check_numerics"),
    grad=_check_numerics_grad,
    num_inputs=1,
    attrs={"message": "str"},
    defaults={},
    kinds=shape_rules.float_kinds,
    batch=bt.elementwise,
)


def check_numerics(tensor, message, name=None):
    """`tensor` itself, after checking it has no NaN or Inf; otherwise InvalidArgumentError
    naming the op, `message` and, in a traced function, the line that made the check.
    Its gradient checks the incoming gradient the same way. Use the result: like any pure
    op, a check whose result nothing uses is removed from a graph.

    >>> y = df.debugging.check_numerics(df.log(x), "log of x")
    """
    if not isinstance(message, str):
        raise _args.error(f"check_numerics: message must be a str, got {message!r}")
    return run_op(_CHECK_NUMERICS, (tensor,), {"message": message}, name)


# ------------------------------------------------------------------ assert (converted `assert`)
def _assert_infer(shapes, dts, attrs):
    if dts is not None and dts[0] is not None and dts[0].name != "bool":
        raise errors.InvalidArgumentError(f"assert: the condition must be bool, got {dts[0].name}")
    return []


def _assert_kernel(condition, message):
    if not np.all(condition):
        raise errors.InvalidArgumentError(_visible(message))


_ASSERT = register(
    name="assert",
    kernel=_assert_kernel,
    infer=_assert_infer,
    grad=None,
    num_inputs=1,
    attrs={"message": "str"},
    defaults={},
    num_outputs=0,
    stateful=True,
    batch=bt.elementwise,
)


def check_true(condition, message, name=None):
    """Raise InvalidArgumentError(`message`) when the bool tensor `condition` is false where
    the op runs (a stateful op: kept in program order, never pruned). A converted `assert`
    on a tensor becomes this op (defun/autograph)."""
    if not isinstance(message, str):
        raise _args.error(f"assert: message must be a str, got {message!r}")
    run_op(_ASSERT, (condition,), {"message": message}, name)


# ------------------------------------------------------------------ check_batch_size
def _check_batch_size_kernel(x, size, message):
    if x.shape[0] != int(size):
        raise errors.InvalidArgumentError(message.format(got=x.shape[0], want=int(size)))
    return x


def _check_batch_size_infer(shapes, dts, attrs):
    if not shapes[0]:
        raise errors.InvalidArgumentError("check_batch_size: the batched tensor must have rank >= 1")
    return [(tuple(shapes[0]), dts[0])]


# Internal (df.vmap): a mapped argument whose batch size is unknown while tracing, checked
# against the batch's when it runs: `message` names both arguments, with {got} and {want}.
# An ONNX export keeps the value and drops the check (ONNX has no assertion).
_CHECK_BATCH_SIZE = register(
    name="check_batch_size",
    kernel=_check_batch_size_kernel,
    infer=_check_batch_size_infer,
    grad=lambda op, g: [g, None],
    num_inputs=2,
    attrs={"message": "str"},
    defaults={},
    onnx=lambda e, node, ins: e.op("Identity", ins[0]),
    batch="internal to vmap, emitted batched",
)
