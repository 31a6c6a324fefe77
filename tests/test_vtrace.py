"""Numerics of tf_vtrace against the float64 O(T²) reference, and its conventions."""
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from tolerances import SUBPROCESS_TIMEOUT_S, assert_close_to_rounding, rtol_for
from vtrace_reference import categorical_log_probs, gae, vtrace_reference

import tf_vtrace

tfd = tfp.distributions


def make_batch(shape=(7, 5), seed=0, log_rho_scale=2.5):
    """Random V-trace inputs with log ρ spanning ±log_rho_scale and terminals."""
    rng = np.random.default_rng(seed)
    discounts = 0.9 * (rng.uniform(size=shape) > 0.15)  # some episodes end
    return dict(
        log_rhos=rng.uniform(-log_rho_scale, log_rho_scale, size=shape),
        discounts=discounts,
        rewards=rng.normal(size=shape),
        values=rng.normal(size=shape),
        bootstrap_value=rng.normal(size=shape[1:]),
    )


def as_tensors(batch, dtype=tf.float32):
    return {k: tf.constant(v, dtype) for k, v in batch.items()}


def assert_clipping_active(log_rhos, threshold):
    """The test data must hit both sides of the threshold, or clipping is untested."""
    rhos = np.exp(log_rhos)
    assert (rhos > threshold).mean() > 0.1 and (rhos < threshold).mean() > 0.1


CLIP_CASES = [
    # (ρ̄, ρ̄_pg, c̄, λ)
    (1.0, 1.0, 1.0, 1.0),
    (3.7, 2.2, 1.0, 1.0),
    (3.7, 2.2, 0.8, 0.9),
    (None, 2.2, 1.0, 0.95),
    (3.7, None, 1.3, 1.0),
    (None, None, None, 0.7),
]


@pytest.mark.parametrize("scan", ["sequential", "associative"])
@pytest.mark.parametrize("jit_compile", [True, False])
@pytest.mark.parametrize("rho_bar,pg_rho_bar,c_bar,lambda_", CLIP_CASES)
def test_matches_reference(rho_bar, pg_rho_bar, c_bar, lambda_, jit_compile,
                           scan):
    batch = make_batch()
    for threshold in (rho_bar, pg_rho_bar, c_bar):
        if threshold is not None:
            assert_clipping_active(batch["log_rhos"], threshold)
    out = tf_vtrace.from_importance_weights(
        **as_tensors(batch, tf.float64), clip_rho_threshold=rho_bar,
        clip_pg_rho_threshold=pg_rho_bar, clip_c_threshold=c_bar,
        lambda_=lambda_, jit_compile=jit_compile, scan=scan)
    vs, pg = vtrace_reference(**batch, clip_rho_threshold=rho_bar,
                              clip_pg_rho_threshold=pg_rho_bar,
                              clip_c_threshold=c_bar, lambda_=lambda_)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-12,
                               atol=1e-12)


def test_float32_matches_reference_to_float32_precision():
    batch = make_batch(shape=(20, 8), seed=1)
    out = tf_vtrace.from_importance_weights(**as_tensors(batch),
                                            clip_rho_threshold=3.7,
                                            clip_pg_rho_threshold=2.2)
    vs, pg = vtrace_reference(**batch, clip_rho_threshold=3.7,
                              clip_pg_rho_threshold=2.2)
    assert out.vs.dtype == tf.float32
    # A T = 20 step recursion in float32 against float64.
    assert_close_to_rounding(out.vs.numpy(), vs, np.float32, n_reduced=20)
    assert_close_to_rounding(out.pg_advantages.numpy(), pg, np.float32, n_reduced=20)


def test_per_step_lambda():
    batch = make_batch(seed=2)
    lambdas = np.random.default_rng(3).uniform(0.5, 1.0, size=batch["values"].shape)
    out = tf_vtrace.from_importance_weights(
        **as_tensors(batch, tf.float64), lambda_=tf.constant(lambdas),
        clip_rho_threshold=3.7)
    vs, pg = vtrace_reference(**batch, lambda_=lambdas, clip_rho_threshold=3.7)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-12)


def test_trailing_dims():
    batch = make_batch(shape=(6, 4, 3, 2), seed=4)
    out = tf_vtrace.from_importance_weights(**as_tensors(batch, tf.float64),
                                            clip_rho_threshold=3.7)
    vs, pg = vtrace_reference(**batch, clip_rho_threshold=3.7)
    assert out.vs.shape == (6, 4, 3, 2)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-12)


def to_batch_major(array):
    return np.swapaxes(array, 0, 1)


def test_batch_major_matches_time_major():
    batch = make_batch(shape=(7, 3, 2), seed=5)
    batch_major = {k: (v if k == "bootstrap_value" else to_batch_major(v))
                   for k, v in batch.items()}
    out = tf_vtrace.from_importance_weights(
        **as_tensors(batch_major, tf.float64), time_major=False,
        clip_rho_threshold=3.7, lambda_=0.9)
    vs, pg = vtrace_reference(**batch, clip_rho_threshold=3.7, lambda_=0.9)
    assert out.vs.shape == (3, 7, 2)
    np.testing.assert_allclose(out.vs.numpy(), to_batch_major(vs), rtol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), to_batch_major(pg),
                               rtol=1e-12)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_unknown_time_and_batch_inside_tf_function(jit_compile):
    spec = tf.TensorSpec([None, None], tf.float64)

    @tf.function(input_signature=[spec] * 4 + [tf.TensorSpec([None], tf.float64)])
    def targets(log_rhos, discounts, rewards, values, bootstrap_value):
        out = tf_vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values, bootstrap_value,
            clip_rho_threshold=3.7, jit_compile=jit_compile, validate_args=True)
        return out.vs, out.pg_advantages

    for shape in [(4, 3), (9, 2)]:
        batch = make_batch(shape=shape, seed=6)
        vs, pg = targets(**as_tensors(batch, tf.float64))
        ref_vs, ref_pg = vtrace_reference(**batch, clip_rho_threshold=3.7)
        np.testing.assert_allclose(vs.numpy(), ref_vs, rtol=1e-12)
        np.testing.assert_allclose(pg.numpy(), ref_pg, rtol=1e-12)


def test_unknown_shapes_mismatch_asserted_at_run_time():
    spec = tf.TensorSpec([None, None], tf.float32)

    @tf.function(input_signature=[spec] * 4 + [tf.TensorSpec([None], tf.float32)])
    def targets(log_rhos, discounts, rewards, values, bootstrap_value):
        return tf_vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values, bootstrap_value,
            validate_args=True).vs

    batch = as_tensors(make_batch(shape=(4, 3)))
    batch["rewards"] = tf.zeros([5, 3])
    with pytest.raises(tf.errors.InvalidArgumentError, match="rewards"):
        targets(**batch)


def test_inside_callers_jit_compiled_function():
    batch = make_batch(shape=(10, 4), seed=7)

    @tf.function(jit_compile=True)
    def targets(inputs):
        return tf_vtrace.from_importance_weights(**inputs, clip_rho_threshold=3.7)

    out = targets(as_tensors(batch, tf.float64))
    vs, pg = vtrace_reference(**batch, clip_rho_threshold=3.7)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-12)


# --- Identities that pin conventions ----------------------------------------


def test_unit_thresholds_give_pg_advantages_equal_to_vs_minus_values():
    batch = make_batch(seed=8)
    out = tf_vtrace.from_importance_weights(**as_tensors(batch, tf.float64))
    np.testing.assert_allclose(out.pg_advantages.numpy(),
                               out.vs.numpy() - batch["values"], rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("lambda_", [1.0, 0.95, 0.5])
def test_on_policy_equals_gae(lambda_):
    batch = make_batch(seed=9)
    batch["log_rhos"] = np.zeros_like(batch["log_rhos"])
    out = tf_vtrace.from_importance_weights(**as_tensors(batch, tf.float64),
                                            lambda_=lambda_)
    expected = gae(batch["discounts"], batch["rewards"], batch["values"],
                   batch["bootstrap_value"], lambda_)
    np.testing.assert_allclose(out.vs.numpy() - batch["values"], expected,
                               rtol=1e-12, atol=1e-12)


def test_zero_discount_splits_batch_into_independent_episodes():
    batch = make_batch(shape=(9, 3), seed=10)
    batch["discounts"] = np.full_like(batch["discounts"], 0.95)
    cut = 4  # the first episode ends at step 4
    batch["discounts"][cut] = 0.0
    whole = tf_vtrace.from_importance_weights(
        **as_tensors(batch, tf.float64), clip_rho_threshold=3.7, lambda_=0.9)

    first = {k: v[:cut + 1] for k, v in batch.items() if k != "bootstrap_value"}
    # Any bootstrap works for the first episode: its last discount is zero.
    first["bootstrap_value"] = np.full(3, 1e6)
    second = {k: v[cut + 1:] for k, v in batch.items() if k != "bootstrap_value"}
    second["bootstrap_value"] = batch["bootstrap_value"]
    parts = [tf_vtrace.from_importance_weights(
        **as_tensors(part, tf.float64), clip_rho_threshold=3.7, lambda_=0.9)
        for part in (first, second)]
    for field in ("vs", "pg_advantages"):
        joined = np.concatenate([getattr(p, field).numpy() for p in parts])
        np.testing.assert_allclose(getattr(whole, field).numpy(), joined,
                                   rtol=1e-12, atol=1e-12)


# --- Numerics: extremes and dtypes -------------------------------------------


@pytest.mark.parametrize("extreme", [1000.0, -1000.0])
def test_extreme_log_rhos_stay_finite(extreme):
    batch = as_tensors(make_batch(shape=(6, 4)))
    batch["log_rhos"] = tf.fill([6, 4], extreme)
    out = tf_vtrace.from_importance_weights(**batch, clip_rho_threshold=3.7,
                                            clip_pg_rho_threshold=2.2)
    assert np.isfinite(out.vs.numpy()).all()
    assert np.isfinite(out.pg_advantages.numpy()).all()
    if extreme < 0:  # ρ = 0: no correction at all, vs = V.
        np.testing.assert_allclose(out.vs.numpy(), batch["values"].numpy())


def test_float64_keeps_full_precision():
    batch = make_batch(shape=(30, 4), seed=11)
    out = tf_vtrace.from_importance_weights(**as_tensors(batch, tf.float64),
                                            clip_rho_threshold=3.7, lambda_=0.97)
    vs, _ = vtrace_reference(**batch, clip_rho_threshold=3.7, lambda_=0.97)
    assert out.vs.dtype == tf.float64
    # Far below float32's resolution (~1e-7): no float32 round trip inside.
    assert np.max(np.abs(out.vs.numpy() - vs)) < 1e-12


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_precision_is_computed_in_float32_and_returned_in_input_dtype(dtype):
    batch = make_batch(shape=(12, 4), seed=12, log_rho_scale=1.0)
    half = {k: tf.constant(v, dtype) for k, v in batch.items()}
    out = tf_vtrace.from_importance_weights(**half)
    assert out.vs.dtype == dtype and out.pg_advantages.dtype == dtype
    # The reference on the half-rounded inputs, rounded once at the end: the
    # only error left is the final cast (a float16 recursion would drift more).
    rounded = {k: v.numpy().astype(np.float64) for k, v in half.items()}
    vs, _ = vtrace_reference(**rounded)
    expected = tf.cast(tf.constant(vs, tf.float32), dtype).numpy().astype(np.float64)
    resolution = 2.0 ** (-7 if dtype == tf.bfloat16 else -10)
    np.testing.assert_allclose(out.vs.numpy().astype(np.float64), expected,
                               atol=resolution * np.abs(vs).max())


def test_outputs_carry_no_gradient():
    batch = as_tensors(make_batch(shape=(5, 3)))
    with tf.GradientTape(persistent=True) as tape:
        for tensor in batch.values():
            tape.watch(tensor)
        out = tf_vtrace.from_importance_weights(**batch)
        total = tf.reduce_sum(out.vs) + tf.reduce_sum(out.pg_advantages)
    for name, tensor in batch.items():
        assert tape.gradient(total, tensor) is None, name


# --- From logits --------------------------------------------------------------


def make_logits_batch(T=8, B=5, num_actions=4, seed=13, time_major=True):
    rng = np.random.default_rng(seed)
    batch = make_batch(shape=(T, B), seed=seed)
    del batch["log_rhos"]
    # Each action, including the last, appears in every column's sample.
    actions = (np.arange(T * B).reshape(T, B) + rng.integers(0, 2, (T, B))) % num_actions
    assert set(np.unique(actions)) == set(range(num_actions))
    batch["actions"] = actions
    batch["behaviour_policy_logits"] = rng.normal(scale=1.5, size=(T, B, num_actions))
    batch["target_policy_logits"] = rng.normal(scale=1.5, size=(T, B, num_actions))
    return batch


def logits_reference(batch, **kwargs):
    target = categorical_log_probs(batch["target_policy_logits"], batch["actions"])
    behaviour = categorical_log_probs(batch["behaviour_policy_logits"],
                                      batch["actions"])
    log_rhos = target - behaviour
    vs, pg = vtrace_reference(log_rhos, batch["discounts"], batch["rewards"],
                              batch["values"], batch["bootstrap_value"], **kwargs)
    return vs, pg, log_rhos, behaviour, target


def logits_tensors(batch, dtype=tf.float64):
    return {k: (tf.constant(v) if k == "actions" else tf.constant(v, dtype))
            for k, v in batch.items()}


@pytest.mark.parametrize("jit_compile", [True, False])
def test_from_logits_matches_reference(jit_compile):
    batch = make_logits_batch()
    out = tf_vtrace.from_logits(**logits_tensors(batch), clip_rho_threshold=3.7,
                                clip_pg_rho_threshold=2.2, jit_compile=jit_compile)
    vs, pg, log_rhos, behaviour, target = logits_reference(
        batch, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2)
    assert_clipping_active(log_rhos, 2.2)
    for got, want in [(out.vs, vs), (out.pg_advantages, pg),
                      (out.log_rhos, log_rhos),
                      (out.behaviour_action_log_probs, behaviour),
                      (out.target_action_log_probs, target)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_from_logits_batch_major():
    batch = make_logits_batch(seed=14)
    batch_major = {k: (v if k == "bootstrap_value" else to_batch_major(v))
                   for k, v in batch.items()}
    out = tf_vtrace.from_logits(**logits_tensors(batch_major), time_major=False)
    vs, pg, log_rhos, _, _ = logits_reference(batch)
    np.testing.assert_allclose(out.vs.numpy(), to_batch_major(vs), rtol=1e-10)
    np.testing.assert_allclose(out.log_rhos.numpy(), to_batch_major(log_rhos),
                               rtol=1e-10)


def test_multi_head_log_rhos_are_summed_with_target_minus_behaviour():
    heads = [make_logits_batch(num_actions=n, seed=20 + n) for n in (3, 5)]
    common = {k: heads[0][k] for k in
              ("discounts", "rewards", "values", "bootstrap_value")}
    out = tf_vtrace.multi_from_logits(
        [tf.constant(h["behaviour_policy_logits"]) for h in heads],
        [tf.constant(h["target_policy_logits"]) for h in heads],
        [tf.constant(h["actions"]) for h in heads],
        **{k: tf.constant(v) for k, v in common.items()},
        clip_rho_threshold=3.7)
    expected_log_rhos = sum(logits_reference(h)[2] for h in heads)
    np.testing.assert_allclose(out.log_rhos.numpy(), expected_log_rhos, rtol=1e-10)
    vs, pg = vtrace_reference(expected_log_rhos, **common, clip_rho_threshold=3.7)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-10)
    assert len(out.behaviour_action_log_probs) == 2

    swapped = tf_vtrace.multi_from_logits(
        [tf.constant(h["target_policy_logits"]) for h in heads],
        [tf.constant(h["behaviour_policy_logits"]) for h in heads],
        [tf.constant(h["actions"]) for h in heads],
        **{k: tf.constant(v) for k, v in common.items()})
    np.testing.assert_allclose(swapped.log_rhos.numpy(), -out.log_rhos.numpy(),
                               rtol=1e-12)


def test_precomputed_behaviour_log_probs_are_used():
    batch = make_logits_batch(seed=15)
    given = np.random.default_rng(0).normal(size=batch["actions"].shape) - 2.0
    tensors = logits_tensors(batch)
    out = tf_vtrace.multi_from_logits(
        [tensors.pop("behaviour_policy_logits")],
        [tensors.pop("target_policy_logits")], [tensors.pop("actions")],
        **tensors, behaviour_action_log_probs=[tf.constant(given)])
    target = categorical_log_probs(batch["target_policy_logits"], batch["actions"])
    np.testing.assert_allclose(out.log_rhos.numpy(), target - given, rtol=1e-10)
    np.testing.assert_allclose(out.behaviour_action_log_probs[0].numpy(), given)


def gaussian_head(params):
    loc, log_scale = tf.split(params, 2, axis=-1)
    return tfd.Independent(tfd.Normal(loc, tf.exp(log_scale)), 1)


def test_continuous_head_with_dist_class():
    rng = np.random.default_rng(16)
    T, B, D = 6, 4, 2
    batch = make_batch(shape=(T, B), seed=16)
    del batch["log_rhos"]
    mu_params, pi_params = rng.normal(size=(2, T, B, 2 * D)) * 0.7
    actions = rng.normal(size=(T, B, D))

    def normal_log_prob(params):
        loc, log_scale = params[..., :D], params[..., D:]
        z = (actions - loc) / np.exp(log_scale)
        return (-0.5 * z ** 2 - log_scale - 0.5 * np.log(2 * np.pi)).sum(-1)

    out = tf_vtrace.from_logits(
        tf.constant(mu_params), tf.constant(pi_params), tf.constant(actions),
        **{k: tf.constant(v) for k, v in batch.items()}, dist_class=gaussian_head)
    log_rhos = normal_log_prob(pi_params) - normal_log_prob(mu_params)
    np.testing.assert_allclose(out.log_rhos.numpy(), log_rhos, rtol=1e-10)
    vs, _ = vtrace_reference(log_rhos, **batch)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-10)


def test_model_is_passed_to_dist_class():
    seen = []

    def dist_class(params, model):
        seen.append(model)
        return tfd.Categorical(logits=params / model["temperature"])

    batch = logits_tensors(make_logits_batch(seed=17))
    tf_vtrace.from_logits(**batch, dist_class=dist_class,
                          model={"temperature": 2.0})
    assert seen == [{"temperature": 2.0}] * 2


def test_gradients_flow_through_log_probs_only():
    batch = logits_tensors(make_logits_batch(seed=18), tf.float32)
    target_logits = tf.Variable(batch.pop("target_policy_logits"))
    values = tf.Variable(batch.pop("values"))
    with tf.GradientTape(persistent=True) as tape:
        out = tf_vtrace.from_logits(target_policy_logits=target_logits,
                                    values=values, **batch)
        targets = tf.reduce_sum(out.vs) + tf.reduce_sum(out.pg_advantages)
        log_prob_sum = tf.reduce_sum(out.target_action_log_probs)
    assert tape.gradient(targets, target_logits) is None
    assert tape.gradient(targets, values) is None
    grad = tape.gradient(log_prob_sum, target_logits)
    assert grad is not None and np.abs(grad.numpy()).max() > 0.1


@pytest.mark.parametrize("shape", [(5, 3, 4), (7, 2, 6)])
def test_eager_log_prob_derivatives_are_one_hot_minus_softmax(shape):
    """d log π(a) / d logits = one_hot(a) − softmax(logits), both ways.

    The eager call runs the cached concrete function of its exact shapes
    flat; the tapes must still record it. Two shapes in one process: each
    gets its own function, not the other's."""
    T, B, A = shape
    rng = np.random.default_rng(23)
    logits = tf.constant(rng.normal(size=shape))
    actions = rng.integers(0, A, size=(T, B))
    weights = rng.normal(size=(T, B))
    tangent = rng.normal(size=shape)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        log_probs = tf_vtrace.log_probs_from_logits_and_actions(logits, actions)
        weighted = tf.reduce_sum(log_probs * weights)
    gradient = tape.gradient(weighted, logits).numpy()
    with tf.autodiff.ForwardAccumulator(logits, tf.constant(tangent)) as acc:
        forward = acc.jvp(tf_vtrace.log_probs_from_logits_and_actions(
            logits, actions)).numpy()
    x = logits.numpy()
    softmax = np.exp(x - x.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    one_hot = np.eye(A)[actions]
    np.testing.assert_allclose(log_probs, categorical_log_probs(x, actions),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gradient, weights[..., None] * (one_hot - softmax),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        forward, np.sum((one_hot - softmax) * tangent, -1), rtol=1e-12,
        atol=1e-12)


def test_reference_api_calls_run_unchanged():
    """Positional and keyword calls written for the reference API still work."""
    batch = make_logits_batch(seed=19)
    t = logits_tensors(batch)
    positional = tf_vtrace.from_logits(
        t["behaviour_policy_logits"], t["target_policy_logits"], t["actions"],
        t["discounts"], t["rewards"], t["values"], t["bootstrap_value"],
        None, None, 3.7, 2.2)
    keyword = tf_vtrace.from_logits(**t, dist_class=None, model=None,
                                    clip_rho_threshold=3.7,
                                    clip_pg_rho_threshold=2.2)
    multi = tf_vtrace.multi_from_logits(
        [t["behaviour_policy_logits"]], [t["target_policy_logits"]],
        [t["actions"]], t["discounts"], t["rewards"], t["values"],
        t["bootstrap_value"], None, None, None, 3.7, 2.2)
    for field in tf_vtrace.VTraceReturns._fields:
        np.testing.assert_array_equal(getattr(positional, field),
                                      getattr(keyword, field))
        np.testing.assert_array_equal(getattr(positional, field),
                                      getattr(multi, field))
    np.testing.assert_array_equal(multi.target_action_log_probs[0],
                                  positional.target_action_log_probs)


def parameter_names(function):
    return list(inspect.signature(function).parameters)


def test_signatures_follow_reference_api_order():
    assert parameter_names(tf_vtrace.from_logits)[:11] == [
        "behaviour_policy_logits", "target_policy_logits", "actions", "discounts",
        "rewards", "values", "bootstrap_value", "dist_class", "model",
        "clip_rho_threshold", "clip_pg_rho_threshold"]
    assert parameter_names(tf_vtrace.multi_from_logits)[:12] == [
        "behaviour_policy_logits", "target_policy_logits", "actions", "discounts",
        "rewards", "values", "bootstrap_value", "dist_class", "model",
        "behaviour_action_log_probs", "clip_rho_threshold",
        "clip_pg_rho_threshold"]
    assert parameter_names(tf_vtrace.from_importance_weights)[:7] == [
        "log_rhos", "discounts", "rewards", "values", "bootstrap_value",
        "clip_rho_threshold", "clip_pg_rho_threshold"]
    assert tf_vtrace.VTraceFromLogitsReturns._fields == (
        "vs", "pg_advantages", "log_rhos", "behaviour_action_log_probs",
        "target_action_log_probs")


@pytest.mark.parametrize("jit_compile", [True, False])
def test_policy_gradient_step_inside_callers_tf_function(jit_compile):
    """The usual learner step: tape inside a (jit-compiled) tf.function."""
    batch = logits_tensors(make_logits_batch(seed=21), tf.float32)
    target_logits = tf.Variable(batch.pop("target_policy_logits"))

    @tf.function(jit_compile=jit_compile)
    def step():
        with tf.GradientTape() as tape:
            out = tf_vtrace.from_logits(target_policy_logits=target_logits,
                                        **batch)
            loss = -tf.reduce_sum(out.target_action_log_probs * out.pg_advantages)
        return tape.gradient(loss, target_logits), out.pg_advantages

    grad, advantages = step()
    # d/dlogits of −Σ A·log softmax(logits)[a] = −A·(onehot(a) − softmax).
    probs = tf.nn.softmax(target_logits).numpy()
    onehot = np.eye(probs.shape[-1])[batch["actions"].numpy()]
    expected = -advantages.numpy()[..., None] * (onehot - probs)
    # float32 on both sides; each element goes through one softmax over A.
    assert_close_to_rounding(grad.numpy(), expected, np.float32,
                             n_reduced=probs.shape[-1])


def test_first_call_inside_a_tf_function_then_eager(tmp_path):
    """The compiled kernel is cached process-wide: whichever context traces it
    first (a caller's graph here), later eager calls must reuse it correctly."""
    script = tmp_path / "first_call.py"
    script.write_text(
        "import tensorflow as tf, tf_vtrace\n"
        "args = [tf.zeros([5, 3]), tf.fill([5, 3], 0.9), tf.ones([5, 3]),\n"
        "        tf.zeros([5, 3]), tf.zeros([3])]\n"
        "graph = tf.function(lambda *a: tf_vtrace.from_importance_weights(*a).vs)\n"
        "print(float(graph(*args)[0, 0]),\n"
        "      float(tf_vtrace.from_importance_weights(*args).vs[0, 0]))\n")
    completed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert completed.returncode == 0, completed.stderr[-2000:]
    in_graph, eager = map(float, completed.stdout.split())
    expected = sum(0.9 ** k for k in range(5))  # on-policy discounted return
    assert abs(in_graph - expected) < 1e-5 and abs(eager - expected) < 1e-5


# --- Broadcasting (the peers' rule) ------------------------------------------


def broadcast_batch(shapes, seed, time_major=True):
    """Inputs of the given (time-major) shapes; values shaped like the broadcast."""
    full = np.broadcast_shapes(*shapes.values())
    batch = make_batch(shape=full, seed=seed)
    batch = {k: (v if k == "bootstrap_value" else v[tuple(
        slice(None) if n != 1 else slice(0, 1) for n in shapes[k])])
        for k, v in batch.items()}
    layout = (lambda x: x) if time_major else to_batch_major
    given = {k: (v if k == "bootstrap_value" else layout(v))
             for k, v in batch.items()}
    broadcast = {k: (v if k == "bootstrap_value" else np.broadcast_to(v, full))
                 for k, v in batch.items()}
    return given, broadcast


BROADCAST_SHAPES = [
    # scalable_agent / trfl / RLlib: per-step ratios and discounts, K values.
    dict(log_rhos=(7, 5, 1), discounts=(7, 5, 1), rewards=(7, 5, 3),
         values=(7, 5, 3)),
    # Values and rewards broadcast too; a batch axis of 1 broadcasts.
    dict(log_rhos=(7, 5, 3), discounts=(7, 1, 1), rewards=(7, 5, 1),
         values=(7, 1, 3)),
]


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_broadcast_inputs_match_reference_on_broadcast_arrays(shapes, time_major):
    given, broadcast = broadcast_batch(shapes, seed=30, time_major=time_major)
    assert_clipping_active(broadcast["log_rhos"], 2.2)
    assert_clipping_active(broadcast["log_rhos"], 3.7)
    lambdas = np.random.default_rng(31).uniform(0.5, 1.0, size=(7, 5, 1))
    out = tf_vtrace.from_importance_weights(
        **as_tensors(given, tf.float64), clip_rho_threshold=3.7,
        clip_pg_rho_threshold=2.2, clip_c_threshold=0.8,
        lambda_=tf.constant(lambdas if time_major else to_batch_major(lambdas)),
        time_major=time_major)
    vs, pg = vtrace_reference(**broadcast, clip_rho_threshold=3.7,
                              clip_pg_rho_threshold=2.2, clip_c_threshold=0.8,
                              lambda_=np.broadcast_to(lambdas, (7, 5, 3)))
    layout = (lambda x: x) if time_major else to_batch_major
    assert out.vs.shape == layout(vs).shape == out.pg_advantages.shape
    np.testing.assert_allclose(out.vs.numpy(), layout(vs), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), layout(pg), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_broadcast_with_unknown_time_and_batch(jit_compile):
    """The peers' placeholders: [None, None, 1] ratios, [None, None, K] values."""
    unit = tf.TensorSpec([None, None, 1], tf.float64)
    wide = tf.TensorSpec([None, None, 3], tf.float64)

    @tf.function(input_signature=[unit, unit, wide, wide,
                                  tf.TensorSpec([None, 3], tf.float64)])
    def targets(log_rhos, discounts, rewards, values, bootstrap_value):
        out = tf_vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values, bootstrap_value,
            clip_rho_threshold=3.7, jit_compile=jit_compile, validate_args=True)
        assert out.vs.shape.as_list() == [None, None, 3]
        return out

    shapes = dict(log_rhos=(6, 4, 1), discounts=(6, 4, 1), rewards=(6, 4, 3),
                  values=(6, 4, 3))
    given, broadcast = broadcast_batch(shapes, seed=32)
    out = targets(**as_tensors(given, tf.float64))
    vs, pg = vtrace_reference(**broadcast, clip_rho_threshold=3.7)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-12,
                               atol=1e-12)


def test_equal_shapes_add_no_broadcast_op():
    """The usual call (all shapes equal) traces no BroadcastTo."""
    batch = as_tensors(make_batch(shape=(5, 3)))
    graph = tf.function(lambda b: tf_vtrace.from_importance_weights(**b).vs
                        ).get_concrete_function(batch).graph
    assert "BroadcastTo" not in {op.type for op in graph.get_operations()}


# --- Mixed float dtypes: `values` sets the dtype, the rest is cast ------------


MIXED_CASES = [
    # (values' dtype, the other inputs' dtype): gymnasium's float64 rewards
    # with a float32 model, and float32 data with a float64 critic.
    (tf.float32, tf.float64),
    (tf.float64, tf.float32),
]


def mixed_call(mode):
    """from_importance_weights eagerly, in a tf.function, or jit-compiled."""
    def call(batch, **kwargs):
        return tf_vtrace.from_importance_weights(**batch, **kwargs)
    if mode == "eager":
        return call
    return tf.function(call, jit_compile=(mode == "jit"))


@pytest.mark.parametrize("mode", ["eager", "tf.function", "jit"])
@pytest.mark.parametrize("as_numpy", [False, True])
@pytest.mark.parametrize("values_dtype,other_dtype", MIXED_CASES)
def test_mixed_dtypes_are_cast_to_values_dtype(values_dtype, other_dtype,
                                               as_numpy, mode):
    batch = make_batch(shape=(9, 4), seed=40)
    mixed = {k: (tf.constant(v, values_dtype) if k == "values" else
                 v.astype(other_dtype.as_numpy_dtype) if as_numpy else
                 tf.constant(v, other_dtype)) for k, v in batch.items()}
    lambdas = tf.constant(np.full((9, 4), 0.9), other_dtype)
    threshold = tf.constant(3.7, other_dtype)
    out = mixed_call(mode)(mixed, lambda_=lambdas, clip_rho_threshold=threshold,
                           clip_pg_rho_threshold=2.2)
    assert out.vs.dtype == values_dtype and out.pg_advantages.dtype == values_dtype
    # The convention, exactly: the same as casting every input to `values`'
    # dtype first.
    cast = {k: tf.cast(v, values_dtype) for k, v in mixed.items()}
    expected = tf_vtrace.from_importance_weights(
        **cast, lambda_=tf.cast(lambdas, values_dtype),
        clip_rho_threshold=tf.cast(threshold, values_dtype),
        clip_pg_rho_threshold=2.2)
    for field in ("vs", "pg_advantages"):
        # Eagerly and in a tf.function, the same compiled kernel runs:
        # bit-identical. Inside an outer XLA cluster it may be fused and
        # reordered: rounding over the T = 9 steps.
        np.testing.assert_allclose(
            getattr(out, field).numpy(), getattr(expected, field).numpy(),
            rtol=rtol_for(values_dtype.as_numpy_dtype, 9) if mode == "jit" else 0,
            atol=0)
    # And against the reference on the inputs rounded to the lower dtype.
    low = tf.float32
    rounded = {k: tf.cast(tf.constant(v, low), tf.float64).numpy()
               for k, v in batch.items()}
    vs, _ = vtrace_reference(**rounded, lambda_=0.9, clip_rho_threshold=3.7,
                             clip_pg_rho_threshold=2.2)
    assert_close_to_rounding(out.vs.numpy(), vs, np.float32, n_reduced=9)


def test_mixed_dtypes_give_the_same_result_eagerly_and_in_graphs():
    batch = make_batch(shape=(9, 4), seed=41)
    mixed = {k: tf.constant(v, tf.float32 if k == "values" else tf.float64)
             for k, v in batch.items()}
    results = [mixed_call(mode)(mixed, clip_rho_threshold=3.7)
               for mode in ("eager", "tf.function", "jit")]
    for result in results[1:]:
        assert result.vs.dtype == results[0].vs.dtype == tf.float32
        # The same kernel, maybe fused into an outer XLA cluster: rounding
        # over the T = 9 steps.
        assert_close_to_rounding(result.vs.numpy(), results[0].vs.numpy(),
                                 np.float32, n_reduced=9)


# --- Integer action dtypes ---------------------------------------------------


ACTION_DTYPES = [tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8, tf.uint16,
                 tf.uint32, tf.uint64]


def graph_mode_call(function, mode):
    if mode == "eager":
        return function
    return tf.function(function, jit_compile=(mode == "jit"))


@pytest.mark.parametrize("mode", ["eager", "tf.function", "jit"])
@pytest.mark.parametrize("dtype", ACTION_DTYPES, ids=lambda d: d.name)
def test_every_integer_action_dtype(dtype, mode):
    batch = make_logits_batch(num_actions=6, seed=50)  # every action, the last too
    tensors = logits_tensors(batch)
    tensors["actions"] = tf.constant(batch["actions"], dtype)
    out = graph_mode_call(
        lambda t: tf_vtrace.from_logits(**t, clip_rho_threshold=3.7,
                                        validate_args=(mode != "jit")),
        mode)(tensors)
    vs, pg, log_rhos, behaviour, target = logits_reference(
        batch, clip_rho_threshold=3.7)
    for got, want in [(out.vs, vs), (out.pg_advantages, pg),
                      (out.log_rhos, log_rhos),
                      (out.behaviour_action_log_probs, behaviour),
                      (out.target_action_log_probs, target)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype,num_actions,largest", [
    (tf.uint8, 300, 255),   # 300 does not fit a uint8: compare in a wider type
    (tf.int8, 200, 127),
    (tf.uint16, 3, 2),
])
def test_action_range_check_is_exact_for_narrow_dtypes(dtype, num_actions,
                                                       largest):
    logits = tf.zeros([1, 2, num_actions], tf.float64)
    valid = tf.constant([[0, largest]], dtype)
    log_probs = tf_vtrace.log_probs_from_logits_and_actions(
        logits, valid, validate_args=True)
    np.testing.assert_allclose(log_probs.numpy(), -np.log(num_actions),
                               rtol=1e-12)
    if largest + 1 <= dtype.max:
        with pytest.raises(ValueError, match=r"`actions` must be in \[0, P\)"):
            tf_vtrace.log_probs_from_logits_and_actions(
                tf.zeros([1, 2, largest + 1]), tf.constant([[0, largest + 1]], dtype),
                validate_args=True)


def test_uint64_beyond_int64_is_reported_out_of_range():
    actions = tf.constant([[2 ** 63 + 1]], tf.uint64)
    with pytest.raises(ValueError, match="`actions` must be"):
        tf_vtrace.log_probs_from_logits_and_actions(
            tf.zeros([1, 1, 4]), actions, validate_args=True)


# --- Leaky V-trace -------------------------------------------------------------


@pytest.mark.parametrize("jit_compile", [True, False])
@pytest.mark.parametrize("alpha_", [0.0, 0.3, 1.0])
def test_leaky_vtrace_matches_reference(alpha_, jit_compile):
    batch = make_batch(seed=60)
    for threshold in (3.7, 2.2, 0.8):
        assert_clipping_active(batch["log_rhos"], threshold)
    options = dict(clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2,
                   clip_c_threshold=0.8, lambda_=0.9, alpha_=alpha_)
    out = tf_vtrace.from_importance_weights(
        **as_tensors(batch, tf.float64), **options, jit_compile=jit_compile)
    vs, pg = vtrace_reference(**batch, **options)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-12,
                               atol=1e-12)


def test_alpha_zero_is_unclipped_importance_sampling():
    """α = 0 drops every clipped ratio: the thresholds no longer matter."""
    batch = as_tensors(make_batch(seed=61), tf.float64)
    leaky = tf_vtrace.from_importance_weights(
        **batch, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2,
        clip_c_threshold=0.8, alpha_=0.0)
    unclipped = tf_vtrace.from_importance_weights(
        **batch, clip_rho_threshold=None, clip_pg_rho_threshold=None,
        clip_c_threshold=None)
    for field in ("vs", "pg_advantages"):
        np.testing.assert_allclose(getattr(leaky, field).numpy(),
                                   getattr(unclipped, field).numpy(),
                                   rtol=1e-12, atol=1e-12)


def test_alpha_as_tensor_varies_without_recompiling():
    batch = make_batch(seed=62)
    options = dict(clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2,
                   clip_c_threshold=0.8)
    for alpha_ in (0.0, 0.3, 1.0):
        out = tf_vtrace.from_importance_weights(
            **as_tensors(batch, tf.float64), **options,
            alpha_=tf.constant(alpha_, tf.float64), validate_args=True)
        vs, pg = vtrace_reference(**batch, **options, alpha_=alpha_)
        np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-12,
                                   atol=1e-12)


def test_alpha_one_is_todays_code_path():
    batch = as_tensors(make_batch(seed=63))
    default = tf_vtrace.from_importance_weights(**batch, clip_rho_threshold=3.7)
    for alpha_ in (1.0, 1):
        out = tf_vtrace.from_importance_weights(**batch, clip_rho_threshold=3.7,
                                                alpha_=alpha_)
        np.testing.assert_array_equal(out.vs.numpy(), default.vs.numpy())
        np.testing.assert_array_equal(out.pg_advantages.numpy(),
                                      default.pg_advantages.numpy())

    def op_types(**kwargs):
        graph = tf.function(lambda x: tf_vtrace._tensors.clipped_ratio(
            x, 2.0, **kwargs)).get_concrete_function(batch["log_rhos"]).graph
        return [op.type for op in graph.get_operations()]

    assert op_types(alpha_=1.0) == op_types()  # no extra op at α = 1
    assert "Log1p" in op_types(alpha_=0.3)


def test_leaky_extreme_log_rhos():
    """α = 1 given as a tensor: exactly V-trace, finite even where ρ overflows;
    α < 1: the unclipped part overflows, as documented."""
    batch = as_tensors(make_batch(shape=(6, 4)))
    batch["log_rhos"] = tf.fill([6, 4], 1000.0)
    clipped = tf_vtrace.from_importance_weights(**batch, clip_rho_threshold=3.7)
    one = tf_vtrace.from_importance_weights(**batch, clip_rho_threshold=3.7,
                                            alpha_=tf.constant(1.0))
    assert np.isfinite(one.vs.numpy()).all()
    np.testing.assert_array_equal(one.vs.numpy(), clipped.vs.numpy())
    leaky = tf_vtrace.from_importance_weights(**batch, clip_rho_threshold=3.7,
                                              alpha_=0.5)
    assert not np.isfinite(leaky.pg_advantages.numpy()).all()


def test_leaky_from_logits_matches_reference():
    batch = make_logits_batch(seed=64)
    out = tf_vtrace.from_logits(**logits_tensors(batch), clip_rho_threshold=3.7,
                                clip_pg_rho_threshold=2.2, alpha_=0.3)
    vs, pg, log_rhos, _, _ = logits_reference(
        batch, clip_rho_threshold=3.7, clip_pg_rho_threshold=2.2, alpha_=0.3)
    assert_clipping_active(log_rhos, 2.2)
    np.testing.assert_allclose(out.vs.numpy(), vs, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), pg, rtol=1e-10,
                               atol=1e-12)


def test_eager_calls_of_a_checked_signature_go_straight_to_the_kernel():
    """The second eager call of a signature skips the shape checks (cached
    per signature), yet gives the reference's numbers for each call's own
    values and hyperparameters, still checks the Python numbers, and a new
    shape is checked in full again."""
    from tf_vtrace import _kernel_cache
    rng = np.random.default_rng(3)
    T, B = 6, 4

    def batch():
        return [tf.constant(rng.normal(size=shape).astype(np.float32)) for shape in
                ((T, B), (T, B), (T, B), (T, B), (B,))]

    _kernel_cache.EAGER_KERNELS.clear()
    for step in range(3):  # the first call checks in full, the others are cached
        log_rhos, discounts, rewards, values, bootstrap = batch()
        discounts = tf.abs(discounts) / 2
        out = tf_vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values, bootstrap,
            clip_rho_threshold=1.5 + step, lambda_=0.9)
        expected_vs, expected_pg = vtrace_reference(
            log_rhos.numpy(), discounts.numpy(), rewards.numpy(), values.numpy(),
            bootstrap.numpy(), clip_rho_threshold=1.5 + step, lambda_=0.9)
        assert_close_to_rounding(out.vs.numpy(), expected_vs, np.float32, n_reduced=T)
        assert_close_to_rounding(out.pg_advantages.numpy(), expected_pg, np.float32,
                                 n_reduced=T)
        assert len(_kernel_cache.EAGER_KERNELS) == 1
    with pytest.raises(ValueError, match="`clip_rho_threshold` must be a positive"):
        tf_vtrace.from_importance_weights(log_rhos, discounts, rewards, values,
                                          bootstrap, clip_rho_threshold=-1.0)
    with pytest.raises(ValueError, match="`lambda_` must be in"):
        tf_vtrace.from_importance_weights(log_rhos, discounts, rewards, values,
                                          bootstrap, lambda_=1.5)
    with pytest.raises(ValueError, match="must have the same size or size 1"):
        tf_vtrace.from_importance_weights(log_rhos[:, :3], discounts, rewards, values,
                                          bootstrap)
    with pytest.raises(ValueError, match="scan"):
        tf_vtrace.from_importance_weights(log_rhos, discounts, rewards, values,
                                          bootstrap, scan="fast")
    with tf.GradientTape() as tape:  # cached or not, targets carry no gradient
        tape.watch(values)
        out = tf_vtrace.from_importance_weights(log_rhos, discounts, rewards, values,
                                                bootstrap)
    assert tape.gradient(out.vs, values) is None
