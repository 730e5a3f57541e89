#!/usr/bin/env python3
# Fits the polynomials of vmath.h and prints them as its C arrays (paste them there).
# Chebyshev interpolation at the degree that keeps each within 1e-12 of the exact function
# (mpmath at 40 digits), rewritten as monomials in the variable vmath.h evaluates:
#   erf(x) / x  in t = x*x        on |x| <= 1.5 (relative)
#   erf(x)      in u = (x - 2.75) / 1.25  on 1.5 <= x <= 4 (absolute)
#   exp(r)      in r                     on |r| <= ln(2) / 2 (relative)
# Needs numpy and mpmath (both in PyTorch's environment).
import textwrap

import mpmath
import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as P

mpmath.mp.dps = 40
SPLIT, ONE = 1.5, 4.0
LN2_2 = float(mpmath.log(2)) / 2


def interp(f, lo, hi, deg):
    """Monomial coefficients in u = (x - mid) / half of f's Chebyshev interpolant."""
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    return C.cheb2poly(C.chebinterpolate(lambda u: np.array([f(mid + half * v) for v in u]), deg))


def rescale(c, lo, hi):
    """Coefficients in u back to coefficients in x, u = (x - mid) / half."""
    mid, half = (lo + hi) / 2, (hi - lo) / 2
    out, power = np.zeros(len(c)), np.array([1.0])
    for ck in c:
        out[: len(power)] += ck * power
        power = P.polymul(power, [-mid / half, 1 / half])
    return out


def horner(c, x):
    r = np.zeros_like(x) + c[-1]
    for k in c[-2::-1]:
        r = r * x + k
    return r


def erf_over_x(t):
    t = mpmath.mpf(t)
    return float(mpmath.erf(mpmath.sqrt(t)) / mpmath.sqrt(t) if t > 0 else 2 / mpmath.sqrt(mpmath.pi))


small = rescale(interp(erf_over_x, 0.0, SPLIT * SPLIT, 11), 0.0, SPLIT * SPLIT)
large = interp(lambda x: float(mpmath.erf(mpmath.mpf(x))), SPLIT, ONE, 18)
exp = rescale(interp(lambda r: float(mpmath.exp(mpmath.mpf(r))), -LN2_2, LN2_2, 8), -LN2_2, LN2_2)

x = np.linspace(1e-6, SPLIT, 10001)
err_small = np.max(np.abs(x * horner(small, x * x) / [float(mpmath.erf(v)) for v in x] - 1))
x = np.linspace(SPLIT, ONE, 10001)
u = (x - (SPLIT + ONE) / 2) / ((ONE - SPLIT) / 2)
err_large = np.max(np.abs(horner(large, u) - [float(mpmath.erf(v)) for v in x]))
r = np.linspace(-LN2_2, LN2_2, 10001)
err_exp = np.max(np.abs(horner(exp, r) / [float(mpmath.exp(v)) for v in r] - 1))
assert max(err_small, err_large, err_exp) < 2e-12, (err_small, err_large, err_exp)

for name, c in (("rt_verf_small", small), ("rt_verf_large", large), ("rt_vexp_poly", exp)):
    body = ", ".join(float(v).hex() for v in c)
    print("\n".join(textwrap.wrap(f"static const double {name}[] = {{{body}}};", 96,
                                  subsequent_indent="    ")))
print(f"// erf(x)/x relative {err_small:.2g}, erf absolute {err_large:.2g}, exp relative {err_exp:.2g}")
