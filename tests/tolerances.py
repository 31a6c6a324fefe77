"""The one rule for float tolerances in the tests.

A result computed in `dtype` and compared with a float64 reference, or with
the same quantity computed by other ops in another order (XLA against plain
TensorFlow, a fused kernel against its parts), differs by rounding alone by at
most about

    (n_reduced + ELEMENTWISE_ULPS) · eps(dtype)

relative to the magnitude of what was summed: `n_reduced` rounding errors of
the additions that built it (Higham, *Accuracy and Stability of Numerical
Algorithms*, §4.2: recursive summation of n terms errs by ≤ (n − 1)·u·Σ|x_i|
with u = eps / 2, once for each of the two sides compared) and a few ulps
for the element-wise chain feeding each term (log-softmax, exp of a
log-ratio, the clipping products). `n_reduced` counts every term of the
sum: a loss with four signed terms per step over B·T steps, each from a
T-step recursion, has n_reduced = 4·B·T + T. The bound is relative to
Σ|x_i|; a comparison whose result cancels (a difference of near-equal
numbers, a value near 0) needs an `atol` of that rtol times the summands'
scale.

A tolerance tighter than this must be because both sides are the same ops
in the same order (bit-identical: compare with assert_array_equal, and say
so); one looser must say which numerics need it. Rounding differs between
machines (XLA and oneDNN pick kernels by CPU features), so a tolerance that
holds on one CPU only because two different computations happen to agree
there is a flake elsewhere.

float64 code against the float64 reference (test_vtrace, test_impala_loss,
test_compiled_loss, test_scan, test_layout, test_properties) keeps
rtol 1e-12 or 1e-10: at least 25 times what the worst of those sites
needs (measured: 4e-14, a pg-advantage that cancels), and five orders below
float32's eps, so a float32 round trip anywhere inside still fails them.
"""
import numpy as np

# Rounding errors of the element-wise ops before each reduction term.
ELEMENTWISE_ULPS = 16

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-7


def rtol_for(dtype, n_reduced=1):
    """The relative tolerance for a `dtype` result built from `n_reduced`
    rounded additions (see the module docstring)."""
    if not isinstance(n_reduced, (int, np.integer)) or n_reduced < 1:
        raise ValueError(f"`n_reduced` must be an int >= 1, got {n_reduced!r}.")
    return (int(n_reduced) + ELEMENTWISE_ULPS) * float(np.finfo(np.dtype(dtype)).eps)


def assert_close_to_rounding(actual, desired, dtype, n_reduced=1, err_msg=""):
    """`actual` equals `desired` up to `dtype` rounding over `n_reduced`
    additions: rtol_for(dtype, n_reduced) relative, and that times the largest
    |desired| absolute, for the elements that cancel to near 0 (a
    pg-advantage r + γ·v − V of O(1) terms; the summands' scale is that of
    the largest result)."""
    rtol = rtol_for(dtype, n_reduced)
    desired = np.asarray(desired)
    np.testing.assert_allclose(actual, desired, rtol=rtol,
                               atol=rtol * float(np.abs(desired).max(initial=0.)),
                               err_msg=err_msg)


# The limit on a test's subprocess (a fresh interpreter importing TensorFlow,
# often compiling and training a little). It only turns a hang into a failure,
# so it is far above any honest run: these take 5-60 s alone, and up to 243 s
# were measured at a load average of 18 on 2 cores.
SUBPROCESS_TIMEOUT_S = 900

# The limit on a polling wait for something seconds away when unloaded (an
# actor process or Ray actor starting TensorFlow and giving its first
# unroll): 120 s ran out at a load average of 15 on 2 cores.
POLL_TIMEOUT_S = 600
