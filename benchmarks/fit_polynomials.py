"""Fit the polynomial coefficients of graph/numba_backend/polynomials.py (prints them).

usage: python benchmarks/fit_polynomials.py

Each core is a polynomial P in u on an interval, the rest of the formula exact:
  exp    e**r = 1 + r + r**2 * P(r),                 |r| <= ln(2) / 2 (+ slack)
  tanh   tanh(x) = x + x**3 * P(x**2),               |x| <= TANH_SMALL
  log    log(m) = 2 s + s**3 * P(s**2), s = (m-1)/(m+1), m in [sqrt(1/2), sqrt(2)]
P minimizes the largest relative error of the whole formula: a Remez exchange (weighted,
in 50-digit mpmath arithmetic) from Chebyshev nodes, then each coefficient rounded to the
target dtype; the script prints the coefficients and the relative error left (in units of
the dtype's epsilon) over 20,001 points. Only this script needs mpmath (a dev tool).
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 50
TANH_SMALL = 0.55
LN2_HALF = mp.log(2) / 2


def _cores():
    """{name: (g(u), w(u), interval)}: P(u) approximates g(u); the formula's relative error
    is w(u) * (P(u) - g(u))."""
    def exp_g(r):
        return (mp.exp(r) - 1 - r) / r ** 2 if r != 0 else mp.mpf(1) / 2

    def exp_w(r):
        return r ** 2 / mp.exp(r)

    def tanh_g(u):
        x = mp.sqrt(u)
        return (mp.tanh(x) - x) / x ** 3 if u != 0 else mp.mpf(-1) / 3

    def tanh_w(u):
        x = mp.sqrt(u)
        return x ** 3 / mp.tanh(x) if u != 0 else mp.mpf(0)

    def log_g(u):
        s = mp.sqrt(u)
        return (2 * mp.atanh(s) - 2 * s) / s ** 3 if u != 0 else mp.mpf(2) / 3

    def log_w(u):
        s = mp.sqrt(u)
        return s ** 3 / (2 * mp.atanh(s)) if u != 0 else mp.mpf(0)
    s_max = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)
    slack = mp.mpf("1.0001")
    return {"exp": (exp_g, exp_w, (-LN2_HALF * slack, LN2_HALF * slack)),
            "tanh": (tanh_g, tanh_w, (mp.mpf(0), (TANH_SMALL * slack) ** 2)),
            "log": (log_g, log_w, (mp.mpf(0), (s_max * slack) ** 2))}


def _solve(points, g, w, n):
    """Coefficients (n) and the levelled error E through the reference `points` (n + 1)."""
    rows = [[u ** j for j in range(n)] + [(-1) ** i / w(u) if w(u) else 0] for i, u in enumerate(points)]
    sol = mp.lu_solve(mp.matrix(rows), mp.matrix([g(u) for u in points]))
    return [sol[j] for j in range(n)], sol[n]


def _err(c, g, w, u):
    p = mp.mpf(0)
    for k in reversed(c):
        p = p * u + k
    return w(u) * (p - g(u))


def remez(g, w, lo, hi, n, iterations=12, grid=4000):
    """Coefficients (low to high) of the degree n-1 polynomial minimizing max |w (P - g)|."""
    pts = [lo + (hi - lo) * (1 - mp.cos(mp.pi * i / n)) / 2 for i in range(n + 1)]
    if w(pts[0]) == 0:          # a weight of zero at an end: move the node off it
        pts[0] = lo + (pts[1] - lo) / 10
    xs = [lo + (hi - lo) * (1 - mp.cos(mp.pi * (i + 0.5) / grid)) / 2 for i in range(grid)]
    gs = {x: g(x) for x in xs}
    ws = {x: w(x) for x in xs}
    c = None
    for _ in range(iterations):
        c, _level = _solve(pts, g, w, n)
        es = [ws[x] * (_poly(c, x) - gs[x]) for x in xs]
        # local extrema of alternating sign: the largest of each run of one sign
        runs, cur = [], [0]
        for i in range(1, grid):
            if (es[i] >= 0) == (es[cur[0]] >= 0):
                cur.append(i)
            else:
                runs.append(cur)
                cur = [i]
        runs.append(cur)
        best = [max(r, key=lambda i: abs(es[i])) for r in runs]
        while len(best) > n + 1:        # drop the smallest at an end
            best.pop(0 if abs(es[best[0]]) < abs(es[best[-1]]) else -1)
        if len(best) < n + 1:
            break
        pts = [xs[i] for i in best]
    return c


def _poly(c, u):
    p = mp.mpf(0)
    for k in reversed(c):
        p = p * u + k
    return p


def measure(c, g, w, lo, hi, dtype, points=20001):
    """Largest relative error, in eps of `dtype`, of the formula with rounded coefficients."""
    cr = [mp.mpf(float(dtype(float(k)))) for k in c]
    worst = 0
    for i in range(points):
        u = lo + (hi - lo) * i / (points - 1)
        worst = max(worst, abs(_err(cr, g, w, u)))
    return float(worst / np.finfo(dtype).eps)


def main():
    sizes = {("exp", np.float32): 5, ("exp", np.float64): 11, ("tanh", np.float32): 5,
             ("tanh", np.float64): 11, ("log", np.float32): 3, ("log", np.float64): 8}
    for (name, dtype), n in sizes.items():
        g, w, (lo, hi) = _cores()[name]
        c = remez(g, w, lo, hi, n)
        coefficients = ", ".join(repr(float(dtype(float(k)))) for k in c)
        print(f"{name} {np.dtype(dtype).name} ({n} terms): max rel error "
              f"{measure(c, g, w, lo, hi, dtype, 2001):.3g} eps\n    ({coefficients})")


if __name__ == "__main__":
    main()
