"""Comparing two computations of the same math, so that the verdict holds on any x86-64 CPU.

In float32 the order in which a sum is taken differs between CPU kernels (Intel and AMD, AVX2 and
AVX-512, one thread or several), so two correct implementations of the same network differ by
their rounding: about 1e-7 relative per operation, amplified where terms cancel. Batch
normalization's backward pass on a 12-row batch amplified it to 1.5e-4 on an AMD EPYC (against an
rtol of 1e-4 that held on Intel). In float64 the same rounding is about 1e-16 relative; a network
of a few cells, sums over at most a few hundred terms and cancellation by up to 1e4 keep the
difference below 1e-11 of the largest magnitude compared (1.6e-15 measured on that batch-norm
case). One more source is Keras' own: its exact gelu holds a constant at float32 precision, so in
float64 it is off by up to float32's half-ulp, 6e-8 relative (5e-9 measured against the exact
derivative). A real mistake in a backward pass (a missing term, a wrong sign, a transposed weight)
shows at the order of the values themselves. Hence :func:`assert_same_math`'s tolerances: 1e-6
relative, and 1e-6 of the largest magnitude compared as the absolute part (for entries that
cancel to about zero): 15x above the worst of these effects, 10**5 below a real mistake.
"""
import contextlib

import numpy as np

SAME_MATH_RTOL = 1e-6


@contextlib.contextmanager
def float64_networks():
    """Keras builds float64 layers (and variables) inside the block."""
    import keras

    floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")  # layers take the global policy, fixed at its first use
    try:
        yield
    finally:
        keras.config.set_dtype_policy(policy)
        keras.config.set_floatx(floatx)


def assert_same_math(actual, expected, err_msg=""):
    """``actual`` equals ``expected`` up to float64 rounding (see the module's docstring)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype == np.float64, (actual.dtype, expected.dtype, err_msg)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=SAME_MATH_RTOL, atol=SAME_MATH_RTOL * scale, err_msg=err_msg)
