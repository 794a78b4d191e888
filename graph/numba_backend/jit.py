"""What generated region modules import, and the on-disk cache they live in (imports numba).

A region's source is written once to `<cache dir>/r_<hash>.py` (the hash of the source and
of what it calls) and imported from there, so numba's own cache (`cache=True`, next to the
file) serves the compiled code to the next process. The cache directory is
`$DEFUN_CACHE_DIR/numba`, else `~/.cache/defun/numba`.
"""
import hashlib
import importlib.util
import inspect
import math
import os
import sys
import threading

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core.errors import NumbaError
from numba.extending import intrinsic, overload

from defun.runtime import registry
from defun.runtime.files import write_atomically

__all__ = ["Fallback", "scalar", "tanh", "kernel", "load_region", "cache_dir", "is_compile_error"]


class Fallback(Exception):
    """Raised by a fused region for a case its loops leave to numpy."""


def scalar(x):
    """The value of a 0-d array or scalar (region inputs of rank 0 may be either)."""
    return x[()] if isinstance(x, np.ndarray) else x


@overload(scalar)
def _scalar_overload(x):
    if isinstance(x, types.Array):
        return lambda x: x[()]
    return lambda x: x


def is_compile_error(exc):
    """True if `exc` says numba could not compile a function (not that it failed running)."""
    return isinstance(exc, NumbaError)


# ---------------------------------------------------------------------------------------
# tanh without a libm call, so loops calling it vectorize (libm's scalar tanh costs ~15 ns;
# numpy's own SIMD loop ~2 ns; this, in a vectorized loop, ~3 ns). Within 1.5 eps of the
# exact value (numpy's: 0.8 eps); float32 inputs are computed in float64, then rounded.
#   |x| < 0.55: the odd Taylor series, 20 terms (its ratio there is (2 * 0.55 / pi)**2);
#   else 1 - 2 / (exp(2|x|) + 1), exp(y) = 2**k * exp(r) with |r| <= ln(2) / 2 (a Taylor
#   polynomial of degree 13), y capped at 40 where tanh is 1 to the last bit, so 2**k is
#   an integer shift.
def _tanh_series(terms):
    """Coefficients of x, x**3, ...: 2**2n (2**2n - 1) B_2n / (2n)! (B: Bernoulli numbers)."""
    from fractions import Fraction
    a, bern = [Fraction(0)] * (2 * terms + 1), []
    for m in range(2 * terms + 1):      # the Akiyama-Tanigawa recurrence
        a[m] = Fraction(1, m + 1)
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        bern.append(a[0])
    return [float(Fraction(4 ** n * (4 ** n - 1)) * bern[2 * n] / math.factorial(2 * n))
            for n in range(1, terms + 1)]


_TANH = _tanh_series(20)
_EXP = [1.0 / math.factorial(k) for k in range(14)]
_LN2_HI, _LN2_LO, _INV_LN2 = 6.93147180369123816490e-01, 1.90821492927058770002e-10, 1 / math.log(2)


_CONTRACT = ("contract",)


@intrinsic
def tanh(typingctx, x):
    """tanh of a float scalar, as a float64 (see above). Written as LLVM instructions: one
    call for numba to type (inlining Python source costs ~0.4 s of compile per use), and
    straight-line code the loop vectorizer sees through."""
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        f64, i64 = ir.DoubleType(), ir.IntType(64)
        v = args[0] if signature.args[0] == types.float64 else builder.fpext(args[0], f64)

        def c(value):
            return ir.Constant(f64, value)

        def mul(a, b):
            return builder.fmul(a, b, flags=_CONTRACT)

        def add(a, b):
            return builder.fadd(a, b, flags=_CONTRACT)

        def sub(a, b):
            return builder.fsub(a, b, flags=_CONTRACT)

        def horner(coefficients, t):
            p = c(coefficients[-1])
            for k in coefficients[-2::-1]:
                p = add(mul(p, t), c(k))
            return p
        a = builder.select(builder.fcmp_ordered("<", v, c(0.0)), sub(c(0.0), v), v)
        small = mul(v, horner(_TANH, mul(a, a)))
        aa = add(a, a)
        y = builder.select(builder.fcmp_ordered("<", aa, c(40.0)), aa, c(40.0))
        k = builder.fptosi(add(mul(y, c(_INV_LN2)), c(0.5)), i64)
        kd = builder.sitofp(k, f64)
        r = sub(sub(y, mul(kd, c(_LN2_HI))), mul(kd, c(_LN2_LO)))
        e = mul(horner(_EXP, r), builder.sitofp(builder.shl(ir.Constant(i64, 1), k), f64))
        big = sub(c(1.0), builder.fdiv(c(2.0), add(e, c(1.0)), flags=_CONTRACT))
        signed = builder.select(builder.fcmp_ordered(">", v, c(0.0)), big, sub(c(0.0), big))
        t = builder.select(builder.fcmp_ordered("<", a, c(0.55)), small, signed)
        return builder.select(builder.fcmp_unordered("uno", v, v), v, t)
    return types.float64(x), codegen


# ---------------------------------------------------------------------------------------
_lock = threading.RLock()
_kernels = {}
_modules = {}


def kernel(op_name):
    """The compiled array-level fused form (`runtime.fused.Kernel.fn`) of op `op_name`."""
    k = _kernels.get(op_name)
    if k is None:
        with _lock:
            k = _kernels.get(op_name)
            if k is None:
                k = _kernels[op_name] = njit(cache=True, error_model="numpy")(
                    registry.get(op_name).fused.fn)
    return k


def cache_dir():
    base = os.environ.get("DEFUN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "defun")
    return os.path.join(base, "numba")


def _fingerprint(source):
    """Hash of the source, of this module and of the kernels the source calls (a kernel's code
    is compiled into the region's: a change to it must give another file)."""
    h = hashlib.sha256(source.encode())
    with open(__file__, "rb") as fh:
        h.update(fh.read())
    for line in source.splitlines():
        if "= _kernel(" in line:
            name = line.split("_kernel(", 1)[1].strip("()'\"")
            h.update(inspect.getsource(registry.get(name).fused.fn).encode())
    return h.hexdigest()[:32]


def load_region(source):
    """The `region` function (a numba dispatcher) of `source`, from its file in the cache."""
    key = _fingerprint(source)
    mod = _modules.get(key)
    if mod is None:
        with _lock:
            mod = _modules.get(key)
            if mod is None:
                mod = _modules[key] = _import(key, source)
    return mod.region


def _import(key, source):
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"r_{key}.py")
    if not os.path.exists(path):
        # written once, atomically (another process may write the same file): rewriting
        # it would change its time stamp, which numba's cache index checks
        write_atomically(path, source.encode("utf-8"))
    name = f"defun_numba_region_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
