#!/usr/bin/env python3
"""Fits the polynomial P of `math::exp` (device/src/math.rs).

e^r ~ 1 + r + r^2 * P(r) on |r| <= 1.0005 * ln2 / 2, minimising the maximum
relative error of e^r (Lawson's iteratively reweighted least squares on a
Chebyshev grid). Prints the maximum relative error and P's coefficients,
highest degree first, in the order `horner` takes them. Plain Python 3
(no numpy): `python3 device/tools/fit_exp.py [degree of P, default 4]`.
"""
import math
import sys

A = math.log(2) / 2 * 1.0005


def g(r):
    """(e^r - 1 - r) / r^2 by its series (exact to double rounding)."""
    s, t = 0.0, 0.5
    for k in range(2, 40):
        s += t
        t *= r / (k + 1)
    return s


def solve(m, b):
    """Gaussian elimination with partial pivoting."""
    n = len(b)
    a = [row[:] + [bb] for row, bb in zip(m, b)]
    for i in range(n):
        p = max(range(i, n), key=lambda k: abs(a[k][i]))
        a[i], a[p] = a[p], a[i]
        for k in range(i + 1, n):
            f = a[k][i] / a[i][i]
            for j in range(i, n + 1):
                a[k][j] -= f * a[i][j]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        x[i] = (a[i][n] - sum(a[i][j] * x[j] for j in range(i + 1, n))) / a[i][i]
    return x


def main():
    deg = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    grid = [A * math.cos(math.pi * (i + 0.5) / 4000) for i in range(4000)]
    # The relative error of e^r is r^2 (g(r) - P(r)) / e^r.
    w = [r * r / math.exp(r) for r in grid]
    lw = [1.0] * len(grid)
    for _ in range(200):
        m = [[0.0] * (deg + 1) for _ in range(deg + 1)]
        b = [0.0] * (deg + 1)
        for r, wi, li in zip(grid, w, lw):
            ww = li * wi * wi
            pw = [r**j for j in range(deg + 1)]
            gr = g(r)
            for i in range(deg + 1):
                b[i] += ww * pw[i] * gr
                for j in range(deg + 1):
                    m[i][j] += ww * pw[i] * pw[j]
        c = solve(m, b)
        errs = [abs(wi * (g(r) - sum(cj * r**j for j, cj in enumerate(c)))) for r, wi in zip(grid, w)]
        total = sum(li * e for li, e in zip(lw, errs))
        lw = [li * e / total for li, e in zip(lw, errs)]
    print("max relative error", max(errs))
    print(", ".join("%.9e" % x for x in reversed(c)))


if __name__ == "__main__":
    main()
