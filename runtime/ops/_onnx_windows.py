"""The windows of a conv or pool over NHWC images, for ONNX forms written without ONNX's
Conv / AveragePool (onnxruntime runs those in float32 only) and for the gradients of
conv2d and pooling (ONNX has no op for them): the input padded as TensorFlow pads it, then
one strided Slice per window offset (i, j), in an ONNX Loop over the kh * kw offsets.

    w = Windows(e, x, x_shape, kh, kw, strides, dilations, padding)
    total, = w.loop([(zeros, "float64", 4)], lambda window, i, j, acc: [acc + window(w.pad(x))])

Sizes may be unknown (int64 [1] vectors computed when the model runs). Used by the forms in
runtime/ops/conv_ops.py and pool_ops.py; nothing here imports onnx.
"""
from defun.runtime.ops._onnx import iota

__all__ = ["Windows"]


def _vec(e, v):
    return e.ints([v]) if isinstance(v, int) else v


class Windows:
    """Geometry of the windows: pads (pt, pb, pl, pr), padded sizes, output sizes (ho, wo),
    all int64 [1] vectors; `pad`, `crop`, `positions` and `loop` build on them."""

    def __init__(self, e, x, x_shape, kh, kw, strides, dilations, padding):
        self.e = e
        (self.sh, self.sw), (self.dh, self.dw) = strides, dilations
        self.kh, self.kw = _vec(e, kh), _vec(e, kw)
        self.n = e.dim(x, 0, x_shape)
        self.c = e.dim(x, 3, x_shape)
        self.h, self.w = e.dim(x, 1, x_shape), e.dim(x, 2, x_shape)
        zero = e.ints([0])
        if padding == "SAME":
            self.pt, self.pb = self._same(self.h, self.kh, self.sh, self.dh)
            self.pl, self.pr = self._same(self.w, self.kw, self.sw, self.dw)
        else:
            self.pt = self.pb = self.pl = self.pr = zero
        self.padded = padding == "SAME"
        self.hp = e.op("Add", self.h, e.op("Add", self.pt, self.pb))
        self.wp = e.op("Add", self.w, e.op("Add", self.pl, self.pr))
        self.ho, self.wo = (self._out(size, k, s, d) for size, k, s, d in
                            ((self.hp, self.kh, self.sh, self.dh), (self.wp, self.kw, self.sw, self.dw)))

    def _span(self, k, d):
        e = self.e
        return e.op("Add", e.op("Mul", e.op("Sub", k, e.ints([1])), e.ints([d])), e.ints([1]))

    def _same(self, n, k, s, d):
        """TensorFlow's SAME: total max((ceil(n / s) - 1) s + span - n, 0), the odd one after."""
        e = self.e
        out = e.op("Div", e.op("Add", n, e.ints([s - 1])), e.ints([s]))
        total = e.op("Max", e.op("Sub", e.op("Add", e.op("Mul", e.op("Sub", out, e.ints([1])), e.ints([s])),
                                             self._span(k, d)), n), e.ints([0]))
        before = e.op("Div", total, e.ints([2]))
        return before, e.op("Sub", total, before)

    def _out(self, size, k, s, d):
        e = self.e
        return e.op("Add", e.op("Div", e.op("Sub", size, self._span(k, d)), e.ints([s])), e.ints([1]))

    def pad(self, t, value=0, dtype="float32"):
        """`t` (NHWC, the input's size) padded with `value`."""
        if not self.padded:
            return t
        e = self.e
        z = e.ints([0])
        return e.op("Pad", t, e.op("Concat", z, self.pt, self.pl, z, z, self.pb, self.pr, z, axis=0),
                    e.scalar(value, dtype))

    def crop(self, t):
        """The input-sized part of padded `t`."""
        if not self.padded:
            return t
        e = self.e
        return e.op("Slice", t, e.op("Concat", self.pt, self.pl, axis=0),
                    e.op("Concat", e.op("Add", self.pt, self.h), e.op("Add", self.pl, self.w), axis=0),
                    e.ints([1, 2]))

    def shape(self, channels=None, pooled=True):
        """[n, ho, wo, channels] (or the padded input's [n, hp, wp, c]) as an int64 vector."""
        parts = (self.ho, self.wo) if pooled else (self.hp, self.wp)
        return self.e.op("Concat", self.n, *parts, channels if channels is not None else self.c, axis=0)

    def positions(self):
        """The flat position of each element of the padded input (int64, its shape)."""
        return iota(self.e, self.shape(pooled=False))

    def loop(self, states, body):
        """Run body(window, i, j, states) -> new states for each offset (i, j) in row-major
        order; `window(t)` is the (n, ho, wo, .) strided slice of padded `t` at the offset,
        i and j int64 scalars. `states` are (initial value, dtype, rank); returns the finals."""
        e = self.e
        trips = e.op("Squeeze", e.op("Mul", self.kh, self.kw), e.ints([0]))
        width = e.op("Squeeze", self.kw, e.ints([0]))

        def run(args):
            it, _, *values = args
            i, j = e.op("Div", it, width), e.op("Mod", it, width)
            starts = e.op("Concat", e.op("Mul", e.op("Unsqueeze", i, e.ints([0])), e.ints([self.dh])),
                          e.op("Mul", e.op("Unsqueeze", j, e.ints([0])), e.ints([self.dw])), axis=0)
            spans = e.op("Concat", *[e.op("Add", e.op("Mul", e.op("Sub", o, e.ints([1])), e.ints([s])), e.ints([1]))
                                     for o, s in ((self.ho, self.sh), (self.wo, self.sw))], axis=0)
            ends = e.op("Add", starts, spans)

            def window(t):
                return e.op("Slice", t, starts, ends, e.ints([1, 2]), e.ints([self.sh, self.sw]))
            return [e.op("Identity", e.scalar(True, "bool"))] + list(body(window, i, j, values))
        types = [((), "int64"), ((), "bool")] + [((None,) * rank, dt) for _, dt, rank in states]
        out = e.op("Loop", trips, e.scalar(True, "bool"), *[v for v, _, _ in states], n=len(states),
                   body=e.subgraph(types, run, types[1:], name="window"))
        return [out] if len(states) == 1 else out

    def scatter(self, dtype, contribution, extra=()):
        """The input-sized sum, over the offsets, of contribution(window, i, j, extra states)
        -> (values (n, ho, wo, c), new extra states) added at the positions its window
        read: the adjoint of a windowed read. `extra` are more (initial, dtype, rank) states."""
        e = self.e
        size = e.reduce("ReduceProd", self.shape(pooled=False), None, True)
        flat = e.op("Expand", e.scalar(0, dtype), size)
        where = self.positions()

        def body(window, i, j, values):
            acc, rest = values[0], values[1:]
            add, rest = contribution(window, i, j, rest)
            at = e.op("Unsqueeze", e.op("Reshape", window(where), e.ints([-1])), e.ints([1]))
            return [e.op("ScatterND", acc, at, e.op("Reshape", add, e.ints([-1])), reduction="add")] + list(rest)
        out = self.loop([(flat, dtype, 1)] + list(extra), body)
        return self.crop(e.op("Reshape", out[0], self.shape(pooled=False)))
