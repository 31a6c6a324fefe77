"""The associative (log-depth) scan against the float64 O(T²) reference.

`scan="associative"` reorders the sums and products of the recursion, so it
is checked against the paper's double sum: with clipping active on both sides
and λ < 1 in test_vtrace.py's `test_matches_reference` (parametrized over
`scan`), and here for per-step λ, batch-major layout, trailing dims and
lengths that are not powers of two.
"""
import numpy as np
import pytest
import tensorflow as tf
from test_vtrace import as_tensors, make_batch, to_batch_major
from vtrace_reference import vtrace_reference

import tf_vtrace
from tf_vtrace import impala

RTOL = ATOL = 1e-12  # float64: the reordering costs a few ulps, not more


def assert_matches(out, vs, pg):
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=RTOL,
                               atol=ATOL)


@pytest.mark.parametrize("num_steps", [1, 2, 3, 8, 13, 33])
def test_lengths_that_are_not_powers_of_two(num_steps):
    batch = make_batch(shape=(num_steps, 4), seed=num_steps)
    out = tf_vtrace.from_importance_weights(
        **as_tensors(batch, tf.float64), clip_rho_threshold=3.7,
        clip_c_threshold=0.8, lambda_=0.9, scan="associative")
    assert_matches(out, *vtrace_reference(
        **batch, clip_rho_threshold=3.7, clip_c_threshold=0.8, lambda_=0.9))


def test_per_step_lambda_batch_major_trailing_dims():
    batch = make_batch(shape=(9, 3, 2), seed=7)
    lambdas = np.random.default_rng(8).uniform(0.5, 1.0, size=(9, 3, 2))
    batch_major = {k: (v if k == "bootstrap_value" else to_batch_major(v))
                   for k, v in batch.items()}
    out = tf_vtrace.from_importance_weights(
        **as_tensors(batch_major, tf.float64), time_major=False,
        lambda_=tf.constant(to_batch_major(lambdas)), clip_rho_threshold=3.7,
        clip_c_threshold=0.8, scan="associative")
    vs, pg = vtrace_reference(**batch, lambda_=lambdas, clip_rho_threshold=3.7,
                              clip_c_threshold=0.8)
    assert out.vs.shape == (3, 9, 2)
    np.testing.assert_allclose(out.vs.numpy(), to_batch_major(vs), rtol=RTOL,
                               atol=ATOL)
    np.testing.assert_allclose(out.pg_advantages.numpy(), to_batch_major(pg),
                               rtol=RTOL, atol=ATOL)


def test_unknown_length_inside_tf_function():
    spec = tf.TensorSpec([None, None], tf.float64)

    @tf.function(input_signature=[spec] * 4 + [tf.TensorSpec([None], tf.float64)])
    def targets(*tensors):
        out = tf_vtrace.from_importance_weights(
            *tensors, clip_rho_threshold=3.7, scan="associative")
        return out.vs, out.pg_advantages

    for shape in [(5, 3), (17, 2)]:
        batch = make_batch(shape=shape, seed=9)
        tensors = as_tensors(batch, tf.float64)
        vs, pg = targets(*(tensors[k] for k in (
            "log_rhos", "discounts", "rewards", "values", "bootstrap_value")))
        ref_vs, ref_pg = vtrace_reference(**batch, clip_rho_threshold=3.7)
        np.testing.assert_allclose(vs.numpy(), ref_vs, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(pg.numpy(), ref_pg, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("scan", ["sequential", "auto"])
def test_other_scans_agree_with_associative(scan):
    batch = make_batch(shape=(40, 6), seed=10)
    tensors = as_tensors(batch, tf.float64)
    ours = tf_vtrace.from_importance_weights(**tensors, lambda_=0.95,
                                             scan="associative")
    other = tf_vtrace.from_importance_weights(**tensors, lambda_=0.95, scan=scan)
    np.testing.assert_allclose(ours.vs.numpy(), other.vs.numpy(), rtol=RTOL,
                               atol=ATOL)


def test_scan_threads_through_impala_loss():
    T, B, A = 11, 3, 4
    rng = np.random.default_rng(11)
    args = dict(
        behaviour_policy_logits=tf.constant(rng.normal(size=(T, B, A))),
        target_policy_logits=tf.constant(rng.normal(size=(T, B, A))),
        actions=tf.constant(rng.integers(0, A, size=(T, B)), tf.int32),
        discounts=tf.constant(0.9 * (rng.uniform(size=(T, B)) > 0.2)),
        rewards=tf.constant(rng.normal(size=(T, B))),
        values=tf.constant(rng.normal(size=(T, B))),
        bootstrap_value=tf.constant(rng.normal(size=(B,))),
        mask=tf.constant(np.arange(T)[:, None] < np.array([T, 7, 4])),
        lambda_=0.9, pg_target="lambda_returns")
    losses = [impala.impala_loss(**args, scan=scan)[0].numpy()
              for scan in ("sequential", "associative")]
    np.testing.assert_allclose(losses[0], losses[1], rtol=RTOL)
    targets = impala.vtrace_targets(**args, scan="associative")
    reference = impala.vtrace_targets(**args, scan="sequential")
    np.testing.assert_allclose(targets.vs.numpy(), reference.vs.numpy(),
                               rtol=RTOL, atol=ATOL)


def test_unknown_scan_is_an_error_naming_the_argument():
    batch = make_batch()
    with pytest.raises(ValueError, match="`scan` must be one of"):
        tf_vtrace.from_importance_weights(**as_tensors(batch), scan="parallel")
