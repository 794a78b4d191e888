"""exp, log, log1p, tanh and sigmoid for fused loops: straight-line polynomials, no libm call.

A loop calling libm's scalar `tanhf` (~12 ns) does not vectorize; these are range reduction,
a polynomial and selects (no branch, no table), so LLVM vectorizes the loop they are
inlined in (one SIMD lane per element; float32 computed in float32: eight lanes with AVX2).
Each is a numba intrinsic for float32 and float64 scalars (the input's dtype out), emitted as
LLVM instructions into the caller: nothing to inline, one signature for numba to type (numba
would branch on Python's `a if c else b`, which keeps the loop scalar). codegen.py writes
them into region sources in place of `np.tanh(...)` etc. (its `_FASTER`).

Coefficients: fitted by benchmarks/fit_polynomials.py (a weighted Remez exchange in 50-digit
arithmetic, minimizing each formula's largest relative error, then rounded to the dtype),
printed there with the error left (under 0.05 eps from the polynomial itself).

    exp(x)  = 2**k * e**r, k = rint(x / ln 2), r = x - k ln 2 (in two parts, Cody-Waite),
              e**r = 1 + r + r**2 P(r); 2**k applied in two halves, so results near
              overflow and in the subnormal range come out right; x clamped (inf -> inf, 0).
    tanh(x) = x + x**3 P(x**2) for |x| < 0.55, else sign(x) (1 - 2e / (1 + e)), e = exp(-2|x|).
    sigmoid = 1 / (1 + e) for x >= 0, e / (1 + e) below, e = exp(-|x|): no cancellation on
              either side (1 - tiny is never formed for x << 0).
    log(x)  = k ln 2 + log(m), x = m 2**k, m in [sqrt(1/2), sqrt(2)); with f = m - 1 and
              s = f / (2 + f): log(m) = f - s (f - s**2 P(s**2)) (the correction is
              ~f**2 / 2, so its rounding is small against f); subnormals scaled first.
    log1p   = log(u) + (x - (u - 1)) / u, u = 1 + x rounded (the correction puts back
              what rounding 1 + x lost; x itself for tiny x).

Errors, in ulp of the correctly rounded value (tests/test_polynomials.py; its bounds, the
largest measured in brackets): float32 exp 1 [0.97], log 1 [0.91], log1p 2 [1.44], tanh 2
[1.47], sigmoid 3 [2.35]; float64 exp 1 [0.97], log 2 [1.10], log1p 2 [1.50], tanh 2 [1.42],
sigmoid 3 [2.32].
The arithmetic lets a * b + c become one fused multiply-add (fastmath "contract") and
nothing else: no reassociation, nan and inf kept.
"""
import decimal
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["exp", "log", "log1p", "tanh", "sigmoid"]

_CONTRACT = ("contract",)


class _V:
    """A float (or i1) LLVM value with Python operators emitting instructions (contract only)."""

    __slots__ = ("k", "v")

    def __init__(self, k, v):
        self.k, self.v = k, v

    def _o(self, other):
        return other.v if isinstance(other, _V) else ir.Constant(self.k.fty, float(other))

    def _arithmetic(instruction):
        """The operator and its reflected form, both emitting `instruction` (fadd, ...)."""
        def forward(self, o):
            return _V(self.k, getattr(self.k.b, instruction)(self.v, self._o(o), flags=_CONTRACT))

        def reflected(self, o):
            return _V(self.k, getattr(self.k.b, instruction)(self._o(o), self.v, flags=_CONTRACT))
        return forward, reflected

    __add__, __radd__ = _arithmetic("fadd")
    __sub__, __rsub__ = _arithmetic("fsub")
    __mul__, __rmul__ = _arithmetic("fmul")
    __truediv__, __rtruediv__ = _arithmetic("fdiv")
    del _arithmetic

    def __neg__(self):
        return _V(self.k, self.k.b.fneg(self.v))

    def _cmp(self, op, o):
        return _V(self.k, self.k.b.fcmp_ordered(op, self.v, self._o(o)))

    def __lt__(self, o):
        return self._cmp("<", o)

    def __gt__(self, o):
        return self._cmp(">", o)

    def __ge__(self, o):
        return self._cmp(">=", o)

    def __eq__(self, o):
        return self._cmp("==", o)

    __hash__ = None


class _Ops:
    """Instructions of one float type at one builder: selects, |x|, powers of two, splits."""

    def __init__(self, builder, numba_type):
        self.b = builder
        f32 = numba_type == types.float32
        self.fty = ir.FloatType() if f32 else ir.DoubleType()
        self.ity = ir.IntType(32 if f32 else 64)
        self.mant, self.bias = (23, 127) if f32 else (52, 1023)
        self.c = _F32 if f32 else _F64

    def where(self, cond, a, b):
        return _V(self, self.b.select(cond.v, a.v if isinstance(a, _V) else ir.Constant(self.fty, float(a)),
                                      b.v if isinstance(b, _V) else ir.Constant(self.fty, float(b))))

    def isnan(self, x):
        return _V(self, self.b.fcmp_unordered("uno", x.v, x.v))

    def both(self, p, q):
        return _V(self, self.b.and_(p.v, q.v))

    def nan_or_zero(self, x):
        return _V(self, self.b.fcmp_unordered("==", x.v, ir.Constant(self.fty, 0.0)))

    def abs(self, x):
        fabs = self.b.module.declare_intrinsic("llvm.fabs", [self.fty])
        return _V(self, self.b.call(fabs, [x.v]))

    def horner(self, cs, u):
        p = cs[-1]
        for c in cs[-2::-1]:
            p = p * u + c
        return p

    def _int(self, n):
        return ir.Constant(self.ity, n)

    def ldexp(self, x, k, halves=True):
        """x * 2**k for an integral k: in two exact powers of two (k // 2 and the rest) for
        k in [-2 bias, 2 bias], so neither overflows nor is subnormal (a nan k counts as 0);
        with halves=False, one (k a normal exponent, never nan)."""
        b = self.b
        kf = b.select(self.isnan(k).v, ir.Constant(self.fty, 0.0), k.v) if halves else k.v
        ki = b.fptosi(kf, self.ity)

        def power(e):
            return b.bitcast(b.shl(b.add(e, self._int(self.bias)), self._int(self.mant)), self.fty)
        if not halves:
            return _V(self, b.fmul(x.v, power(ki)))
        k1 = b.ashr(ki, self._int(1))
        return _V(self, b.fmul(b.fmul(x.v, power(k1)), power(b.sub(ki, k1))))

    def split(self, x):
        """(m, e), x = m * 2**e with m in [1, 2), for a positive normal x (its bits)."""
        b = self.b
        bits = b.bitcast(x.v, self.ity)
        m = b.or_(b.and_(bits, self._int((1 << self.mant) - 1)), self._int(self.bias << self.mant))
        e = b.sub(b.lshr(bits, self._int(self.mant)), self._int(self.bias))
        return _V(self, b.bitcast(m, self.fty)), _V(self, b.sitofp(e, self.fty))


# --------------------------------------------------------------------------- constants
def _ln2_parts(dtype, low_bits_cleared):
    """ln 2 as hi + lo, hi with its low mantissa bits zero (k * hi is exact for the k here),
    lo the rest of ln 2 to 40 digits (not of ln 2 rounded to a float64)."""
    itype = np.uint32 if dtype == np.float32 else np.uint64
    hi = np.array([math.log(2)], dtype).view(itype)
    hi = (hi & ~itype((1 << low_bits_cleared) - 1)).view(dtype)[0]
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        lo = decimal.Decimal(2).ln() - decimal.Decimal(float(hi))
    return hi, dtype(float(lo))


class _Constants:
    """The constants of one float dtype, rounded to it (the instructions' literals)."""

    def __init__(self, dtype, exp_c, tanh_c, log_c, exp_range, tanh_one, tiny_scale):
        d = dtype
        self.ln2_hi, self.ln2_lo = _ln2_parts(dtype, 12 if dtype == np.float32 else 24)
        self.inv_ln2 = d(1 / math.log(2))
        # adding then subtracting 1.5 * 2**mant rounds to an integer (|value| < 2**(mant-1))
        self.shift = d(1.5 * 2.0 ** np.finfo(dtype).nmant)
        self.exp_c = tuple(d(c) for c in exp_c)
        self.tanh_c = tuple(d(c) for c in tanh_c)
        self.log_c = tuple(d(c) for c in log_c)
        self.exp_lo, self.exp_hi = d(exp_range[0]), d(exp_range[1])
        self.tanh_one = d(tanh_one)     # tanh is 1 (rounded) beyond: caps exp's argument
        self.small = d(0.55)
        self.tiny = d(np.finfo(dtype).smallest_normal)
        self.tiny_scale, self.tiny_k = d(2.0 ** tiny_scale), d(tiny_scale)
        self.sqrt2 = d(math.sqrt(2))


_F32 = _Constants(
    np.float32,
    exp_c=(0.4999999403953552, 0.1666652113199234, 0.04166838899254799, 0.008368716575205326,
           0.001381459878757596),
    tanh_c=(-0.33333316445350647, 0.13332585990428925, -0.053852248936891556,
            0.021071404218673706, -0.006273825187236071),
    log_c=(0.6666677594184875, 0.3997756540775299, 0.2987120449542999),
    exp_range=(-104.0, 89.0), tanh_one=10.0, tiny_scale=24)

_F64 = _Constants(
    np.float64,
    exp_c=(0.5, 0.16666666666666682, 0.041666666666666095, 0.008333333333317034,
           0.0013888888889115629, 0.00019841269896383781, 2.4801586926629797e-05,
           2.7557234861944055e-06, 2.755758185155248e-07, 2.511203683343355e-08,
           2.0826625953932532e-09),
    tanh_c=(-0.333333333333333, 0.13333333333326608, -0.0539682539637531, 0.021869488385634656,
            -0.008863232597715941, 0.003592091991772317, -0.001455542590112367,
            0.0005884434069122092, -0.00023337874919463863, 8.331231116986912e-05,
            -1.94920725799383e-05),
    log_c=(0.6666666666666666, 0.4000000000000623, 0.28571428569090146, 0.22222222646219306,
           0.18181775707293152, 0.1538708909775142, 0.13250152268733925, 0.13251045049601404),
    exp_range=(-746.0, 710.0), tanh_one=20.0, tiny_scale=54)


# --------------------------------------------------------------------------- the functions
def _exp_finite(k, x):
    """e**x with x clamped (inf -> inf, -inf -> 0); a nan x gives a nan (callers select)."""
    c = k.c
    y = k.where(x > c.exp_hi, c.exp_hi, x)
    return _exp_reduced(k, k.where(y < c.exp_lo, c.exp_lo, y), True)


def _exp_reduced(k, y, halves):
    """e**y, y in [exp_lo, exp_hi] (halves) or where e**y is normal (not halves)."""
    c = k.c
    n = (y * c.inv_ln2 + c.shift) - c.shift
    r = (y - n * c.ln2_hi) - n * c.ln2_lo
    return k.ldexp(1.0 + (r + r * r * k.horner(c.exp_c, r)), n, halves)


def _exp(k, x):
    return k.where(k.isnan(x), x, _exp_finite(k, x))


def _tanh(k, x):
    c = k.c
    a = k.abs(x)
    u = x * x
    small = x + x * u * k.horner(c.tanh_c, u)
    # |x| capped where tanh rounds to 1 (a nan too: the last select takes x), so e is normal
    e = _exp_reduced(k, -2.0 * k.where(a < c.tanh_one, a, c.tanh_one), False)
    big = 1.0 - (e + e) / (1.0 + e)
    big = k.where(x < 0.0, -big, big)
    # x itself for nan and +-0 (x + x**3 P is +0 at -0: P < 0)
    return k.where(k.nan_or_zero(x), x, k.where(a < c.small, small, big))


def _sigmoid(k, x):
    e = _exp_finite(k, -k.abs(x))
    s = k.where(x >= 0.0, 1.0, e) / (1.0 + e)
    return k.where(k.isnan(x), x, s)


def _log(k, x):
    c = k.c
    sub = x < c.tiny
    m, n = k.split(k.where(sub, x * c.tiny_scale, x))
    n = k.where(sub, n - c.tiny_k, n)
    big = m > c.sqrt2
    m = k.where(big, m * 0.5, m)
    n = k.where(big, n + 1.0, n)
    f = m - 1.0
    s = f / (2.0 + f)
    u = s * s
    lm = f - s * (f - u * k.horner(c.log_c, u))
    r = n * c.ln2_hi + (lm + n * c.ln2_lo)
    r = k.where(x == math.inf, math.inf, r)
    r = k.where(x == 0.0, -math.inf, r)
    r = k.where(x < 0.0, math.nan, r)
    return k.where(k.isnan(x), x, r)


def _log1p(k, x):
    u = 1.0 + x
    lu = _log(k, u)
    # the rounding of 1 + x, put back to first order: log(u) + (x - (u - 1)) / u
    r = k.where(k.both(u > 0.0, u < math.inf), lu + (x - (u - 1.0)) / u, lu)
    return k.where(k.nan_or_zero(x), x, r)      # -0 stays -0


def _scalar_function(name, algorithm, doc):
    """A numba intrinsic: `name(x)` of a float32 or float64 scalar, the same type back,
    written as straight-line instructions into the caller (no call, nothing for numba
    to type but one signature)."""
    def typer(typingctx, x):
        if x not in (types.float32, types.float64):
            return None

        def codegen(context, builder, signature, args):
            k = _Ops(builder, signature.args[0])
            return algorithm(k, _V(k, args[0])).v
        return x(x), codegen
    typer.__name__ = typer.__qualname__ = name
    fn = intrinsic(typer)
    fn.__doc__ = doc
    return fn


exp = _scalar_function("exp", _exp, "e**x in jitted code (float32 or float64).")
log = _scalar_function("log", _log, "The natural log of x in jitted code (float32 or float64).")
tanh = _scalar_function("tanh", _tanh, "tanh(x) in jitted code (float32 or float64).")
log1p = _scalar_function("log1p", _log1p, "log(1 + x) in jitted code (float32 or float64), exact for tiny x.")
sigmoid = _scalar_function("sigmoid", _sigmoid, "1 / (1 + e**-x) in jitted code (float32 or float64).")
