"""Property tests: tf_vtrace against the float64 reference over random inputs."""
import numpy as np
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from vtrace_reference import vtrace_reference

import tf_vtrace

thresholds = st.one_of(st.none(), st.floats(0.2, 4.0))


@st.composite
def vtrace_problems(draw):
    T = draw(st.integers(1, 12))
    B = draw(st.integers(1, 4))
    trailing = draw(st.sampled_from([(), (2,)]))
    shape = (T, B) + trailing
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    batch = dict(
        log_rhos=rng.uniform(-3, 3, size=shape),
        discounts=rng.choice([0.0, 0.5, 0.9, 0.99, 1.0], size=shape),
        rewards=rng.normal(size=shape),
        values=rng.normal(size=shape),
        bootstrap_value=rng.normal(size=shape[1:]),
    )
    options = dict(
        clip_rho_threshold=draw(thresholds),
        clip_pg_rho_threshold=draw(thresholds),
        clip_c_threshold=draw(thresholds),
        lambda_=draw(st.floats(0.0, 1.0)),
    )
    return batch, options


@settings(max_examples=40, deadline=None)
@given(problem=vtrace_problems(), jit_compile=st.booleans(),
       time_major=st.booleans())
def test_random_problems_match_reference(problem, jit_compile, time_major):
    batch, options = problem
    layout = (lambda x: x) if time_major else (lambda x: np.swapaxes(x, 0, 1))
    tensors = {k: tf.constant(v if k == "bootstrap_value" else layout(v))
               for k, v in batch.items()}
    out = tf_vtrace.from_importance_weights(
        **tensors, **options, time_major=time_major, jit_compile=jit_compile)
    vs, pg = vtrace_reference(**batch, **options)
    np.testing.assert_allclose(layout(out.vs.numpy()), vs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(layout(out.pg_advantages.numpy()), pg, rtol=1e-9,
                               atol=1e-9)
