"""Work and scratch declared by the rows whose kernels are not linear in their elements
(`register(cost=)`, read by the budgets of loaded documents, graph/serialize/budget.py).

The unit is what numpy takes to read or write one element of an add; each factor below
was measured against it (one busy 2-core run, float64, ns per charged operation: add 4.7;
before these rows declared their work erf 86, complex pow 172, argsort 464, top_k 698,
a prime-length FFT 371, rfft 879, a 16 x 16 pooling 87, cumsum 48; after, each within
about 2x of the add).

- `n_log_n(factor, axis)`: a sort along an axis: factor * elements * log2(its length).
- `fft_cost(lengths)`: pocketfft's work per transformed axis of length n: a pass per prime
  factor p of n, p operations per element each (2 log2 n for a power of two), or, where
  that is dearer (a large prime factor), Bluestein's three transforms of a smooth length
  m >= 2n - 1 (pocketfft's good size, within ~5% of 2n: 6 m log2 m per row); its buffers
  (complex128 whatever the dtype: a copy of the input, and 2 n, or 4 m for Bluestein, per
  row) as scratch bytes. Measured with the process's peak (numpy does not show pocketfft's
  buffers to tracemalloc), complex64 of 2^21 and of the prime 2097143: 6.0x and 18.0x the
  output's bytes; declared 6.0x and 18.8x.
- `windows(factor)`: pooling: factor operations per window entry of each output pixel.
- `per_input_element(factor)`: a reduction heavy per element it reads (log-sum-exp).
"""
import functools
import math

from defun.runtime.registry import Cost

__all__ = ["n_log_n", "fft_cost", "windows", "triangular", "per_input_element"]


def _log2(n):
    return math.log2(n) if n > 1 else 1.0


def n_log_n(factor, axis=None, scratch=0):
    """The Cost of a sort along attr `axis` (None: the last axis), holding `scratch` (a
    multiple of its largest array, as Cost's)."""
    def work(shapes, out_shapes, attrs):
        s = shapes[0]
        if not s:
            return 0
        n = s[attrs[axis] if axis is not None else -1]
        return int(factor * math.prod(s) * _log2(n))
    return Cost(work=work, scratch=scratch)


def _bluestein_size(n):
    return 2.1 * n      # pocketfft's good size >= 2n - 1 (2^a 3^b 5^c 7^d 11^e), rounded up


@functools.lru_cache(maxsize=256)
def _fft_plan(n):
    """(operations per element, True if Bluestein) of one complex transform of length n."""
    m = _bluestein_size(n)
    bluestein = 6 * m * math.log2(m) / n
    direct, rest, p = 0, n, 2
    while rest > 1 and direct < bluestein:     # trial division, stopped once dearer anyway
        if p * p > rest:
            direct += rest      # `rest` is prime
            break
        while rest % p == 0:
            direct, rest = direct + p, rest // p
        p += 1
    return (direct, False) if direct < bluestein else (bluestein, True)


def fft_cost(lengths):
    """The Cost of a transform over the axes `lengths(shapes, out_shapes, attrs)` names
    (their sizes), on `elements(...)` = the complex elements per axis (the larger side)."""
    def sizes(shapes, out_shapes, attrs):
        ns = lengths(shapes, out_shapes, attrs)
        return ns, max(math.prod(shapes[0]), math.prod(out_shapes[0]))

    def work(shapes, out_shapes, attrs):
        ns, elements = sizes(shapes, out_shapes, attrs)
        return int(sum(elements * _fft_plan(n)[0] for n in ns if n > 0))

    def scratch_bytes(shapes, out_shapes, attrs):
        ns, elements = sizes(shapes, out_shapes, attrs)
        biggest = 0
        for n in ns:
            if n > 0:
                rows = elements // n
                biggest = max(biggest, int(rows * (64 * _bluestein_size(n) if _fft_plan(n)[1] else 32 * n)))
        return 16 * elements + biggest
    return Cost(work=work, scratch_bytes=scratch_bytes)


def windows(factor, scratch=0):
    """The Cost of a pooling row: factor operations per window entry of each pooled pixel
    (the pooled shape: the output of the forward, the gradient input of the backward),
    holding `scratch` (as Cost's)."""
    def work(shapes, out_shapes, attrs):
        kh, kw = attrs["ksize"][-3:-1] if len(attrs["ksize"]) == 4 else attrs["ksize"]
        pooled = min(math.prod(out_shapes[0]), math.prod(shapes[-1]))
        return factor * kh * kw * pooled
    return Cost(work=work, scratch=scratch)


def triangular(cubic):
    """The Cost of a solve by a matrix (..., n, n) of rhs (..., n, k): cubic n^3 per matrix
    (its factorization, 0 for a triangle) and n^2 per right-hand side."""
    def work(shapes, out_shapes, attrs):
        a, b = shapes[0], shapes[1]
        if len(a) < 2:
            return 0
        n = a[-1]
        batch = max(math.prod(a[:-2]), math.prod(b[:-2]) if len(b) > 2 else 1)
        k = b[-1] if len(b) >= 2 else 1
        return int(batch * (cubic * n ** 3 + n * n * k))
    return Cost(work=work)


def per_input_element(factor, scratch=0):
    """The Cost of a kernel doing `factor` operations per element of its first input,
    holding `scratch` (as Cost's)."""
    def work(shapes, out_shapes, attrs):
        return factor * math.prod(shapes[0])
    return Cost(work=work, scratch=scratch)
