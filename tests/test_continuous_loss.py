"""The IMPALA loss with diagonal Gaussian policies, against float64 definitions.

The reference writes the Gaussian log-density, entropy and KL per dimension
from their formulas (not tfp), sums them over the D action dimensions, and
runs the paper's V-trace double sum (tests/vtrace_reference.py). Actions are
sampled from μ and π lags μ by enough that ρ̄ and c̄ clip some steps and not
others; unrolls end early (padding) in some columns.
"""
import doctest

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from vtrace_reference import vtrace_reference

import tf_vtrace.distributions
from tf_vtrace.distributions import diagonal_gaussian, gaussian_params, normal
from tf_vtrace.impala import impala_loss, vtrace_targets

tfd = tfp.distributions
T, B = 9, 6
CLIPS = dict(clip_rho_threshold=1.2, clip_pg_rho_threshold=1.0,
             clip_c_threshold=0.9, lambda_=0.9)
COSTS = dict(baseline_cost=0.3, entropy_cost=0.02, kl_cost=0.1)
HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


def gaussian_log_prob(mean, log_std, actions):
    """Σ_d −½ ((a_d − m_d)/σ_d)² − log σ_d − ½ log 2π, float64."""
    z = (actions - mean) / np.exp(log_std)
    return (-0.5 * z ** 2 - log_std - HALF_LOG_2PI).sum(-1)


def gaussian_entropy(log_std):
    """Σ_d ½ log(2πe) + log σ_d."""
    return (HALF_LOG_2PI + 0.5 + log_std).sum(-1)


def gaussian_kl(mean_mu, log_std_mu, mean_pi, log_std_pi):
    """KL(μ ‖ π) = Σ_d log(σ_π/σ_μ) + (σ_μ² + (m_μ − m_π)²) / (2σ_π²) − ½."""
    var_mu, var_pi = np.exp(2 * log_std_mu), np.exp(2 * log_std_pi)
    return (log_std_pi - log_std_mu
            + (var_mu + (mean_mu - mean_pi) ** 2) / (2 * var_pi) - 0.5).sum(-1)


def interleave(mean, log_std):
    return np.stack([mean, log_std], -1).reshape(mean.shape[:-1] + (-1,))


def make_batch(dim, lag, seed=0):
    """float64 time-major data: μ's and π's (mean, log-std), actions a ~ μ,
    and the lengths of the unrolls (the rest is padding)."""
    rng = np.random.default_rng(seed)
    mean_mu = rng.normal(0, 1, (T, B, dim))
    log_std_mu = rng.normal(-0.5, 0.2, (T, B, dim))
    actions = mean_mu + np.exp(log_std_mu) * rng.normal(size=(T, B, dim))
    return dict(
        mean_mu=mean_mu, log_std_mu=log_std_mu, actions=actions,
        mean_pi=mean_mu + np.exp(log_std_mu) * rng.normal(0, lag, (T, B, dim)),
        log_std_pi=log_std_mu + rng.normal(0, lag / 2, (T, B, dim)),
        discounts=np.where(rng.random((T, B)) < 0.1, 0., 0.95),
        rewards=rng.normal(size=(T, B)), values=rng.normal(size=(T, B)),
        bootstrap_value=rng.normal(size=B),
        lengths=np.array([T, T, T - 3, T, 4, T][:B]))


def reference(batch):
    """Terms (reduction "sum"), the ρ of the valid steps and the masked
    means of entropy and KL."""
    log_pi = gaussian_log_prob(batch["mean_pi"], batch["log_std_pi"],
                               batch["actions"])
    log_mu = gaussian_log_prob(batch["mean_mu"], batch["log_std_mu"],
                               batch["actions"])
    entropy = gaussian_entropy(batch["log_std_pi"])
    kl = gaussian_kl(batch["mean_mu"], batch["log_std_mu"], batch["mean_pi"],
                     batch["log_std_pi"])
    terms = dict(policy_loss=0., baseline_loss=0., entropy_loss=0., kl_loss=0.)
    rhos, entropies, kls = [], [], []
    for b, length in enumerate(batch["lengths"]):
        steps = slice(0, length)
        values = batch["values"][steps, b]
        # A shorter unroll bootstraps from V at its first padded step.
        bootstrap = (batch["bootstrap_value"][b] if length == T
                     else batch["values"][length, b])
        vs, pg = vtrace_reference(
            (log_pi - log_mu)[steps, b], batch["discounts"][steps, b],
            batch["rewards"][steps, b], values, np.asarray(bootstrap), **CLIPS)
        terms["policy_loss"] += -(log_pi[steps, b] * pg).sum()
        terms["baseline_loss"] += COSTS["baseline_cost"] * 0.5 * (
            (vs - values) ** 2).sum()
        terms["entropy_loss"] += -COSTS["entropy_cost"] * entropy[steps, b].sum()
        terms["kl_loss"] += COSTS["kl_cost"] * kl[steps, b].sum()
        rhos += list(np.exp((log_pi - log_mu)[steps, b]))
        entropies += list(entropy[steps, b])
        kls += list(kl[steps, b])
    return terms, np.array(rhos), np.mean(entropies), np.mean(kls)


def mask_of(batch):
    return np.arange(T)[:, None] < batch["lengths"][None, :]


def heads_of(batch, form):
    """(behaviour params, target params, actions, dist_class) in one of the
    forms the loss takes a diagonal Gaussian in."""
    mu = interleave(batch["mean_mu"], batch["log_std_mu"])
    pi = interleave(batch["mean_pi"], batch["log_std_pi"])
    actions = batch["actions"]
    if form == "diagonal_gaussian":
        return mu, pi, actions, diagonal_gaussian
    if form == "independent_normal":
        dim = actions.shape[-1]
        return (np.concatenate([batch["mean_mu"], batch["log_std_mu"]], -1),
                np.concatenate([batch["mean_pi"], batch["log_std_pi"]], -1), actions,
                lambda p: tfd.Independent(
                    tfd.Normal(p[..., :dim], tf.exp(p[..., dim:])), 1))
    # One head per dimension (the packed Keras layout): the loss sums them.
    dim = actions.shape[-1]
    return ([mu[..., 2 * d:2 * d + 2] for d in range(dim)],
            [pi[..., 2 * d:2 * d + 2] for d in range(dim)],
            [actions[..., d] for d in range(dim)], normal)


def loss_of(batch, form, dtype=np.float64):
    mu, pi, actions, dist_class = heads_of(batch, form)
    cast = lambda x: tf.nest.map_structure(lambda a: np.asarray(a, dtype), x)  # noqa: E731
    return impala_loss(
        cast(mu), cast(pi), cast(actions), cast(batch["discounts"]),
        cast(batch["rewards"]), cast(batch["values"]),
        cast(batch["bootstrap_value"]), mask=mask_of(batch),
        dist_class=dist_class, **COSTS, **CLIPS)


@pytest.mark.parametrize("form", ["diagonal_gaussian", "independent_normal",
                                  "one_head_per_dimension"])
@pytest.mark.parametrize("dim", [1, 6])
def test_loss_equals_the_float64_definitions(dim, form):
    batch = make_batch(dim, lag=0.6 / np.sqrt(dim), seed=dim)
    terms, rhos, entropy, kl = reference(batch)
    # Clipping bites both ways: above ρ̄, between c̄ and ρ̄, below c̄.
    assert (rhos > 1.2).mean() > 0.05 and (rhos < 0.9).mean() > 0.05
    assert ((rhos > 0.9) & (rhos < 1.2)).any()
    loss, diagnostics = loss_of(batch, form)
    assert loss.dtype == tf.float64
    np.testing.assert_allclose(float(loss), sum(terms.values()), rtol=1e-9)
    for name, value in terms.items():
        np.testing.assert_allclose(float(diagnostics[name]), value, rtol=1e-9,
                                   atol=1e-12)
    np.testing.assert_allclose(float(diagnostics["entropy"]), entropy, rtol=1e-9)
    np.testing.assert_allclose(float(diagnostics["kl"]), kl, rtol=1e-9)
    assert_ratio_diagnostics(diagnostics, rhos, CLIPS)


def assert_ratio_diagnostics(diagnostics, rhos, clips, rtol=1e-9):
    margin = np.exp(1e-3)
    np.testing.assert_allclose(float(diagnostics["mean_rho"]), rhos.mean(),
                               rtol=rtol)
    np.testing.assert_allclose(
        float(diagnostics["rho_clipped_fraction"]),
        (rhos > clips["clip_rho_threshold"] * margin).mean(), rtol=rtol)
    np.testing.assert_allclose(
        float(diagnostics["c_clipped_fraction"]),
        (rhos > clips["clip_c_threshold"] * margin).mean(), rtol=rtol)
    np.testing.assert_allclose(
        float(diagnostics["ess_fraction"]),
        rhos.sum() ** 2 / (len(rhos) * (rhos ** 2).sum()), rtol=rtol)


def test_float32_loss_and_gradient_match_float64():
    batch = make_batch(6, lag=0.25, seed=3)
    want, _ = loss_of(batch, "diagonal_gaussian")
    got, _ = loss_of(batch, "diagonal_gaussian", np.float32)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-4)

    # The gradient reaches π's mean and log-std: d loss / d params against
    # the float64 one.
    def gradient(dtype):
        _, pi, actions, _ = heads_of(batch, "diagonal_gaussian")
        params = tf.Variable(pi.astype(dtype))
        with tf.GradientTape() as tape:
            loss, _ = impala_loss(
                tf.constant(heads_of(batch, "diagonal_gaussian")[0], dtype), params,
                actions.astype(dtype), batch["discounts"].astype(dtype),
                batch["rewards"].astype(dtype), batch["values"].astype(dtype),
                batch["bootstrap_value"].astype(dtype), mask=mask_of(batch),
                dist_class=diagonal_gaussian, **COSTS, **CLIPS)
        return tape.gradient(loss, params).numpy()

    want, got = gradient(np.float64), gradient(np.float32)
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_padded_steps_may_hold_anything():
    batch = make_batch(6, lag=0.3, seed=4)
    want, _ = loss_of(batch, "diagonal_gaussian")
    padded = ~mask_of(batch)
    for key in ("mean_pi", "log_std_pi", "actions"):
        batch[key] = np.where(padded[..., None], np.nan, batch[key])
    got, diagnostics = loss_of(batch, "diagonal_gaussian")
    np.testing.assert_allclose(float(got), float(want), rtol=1e-12)
    assert all(np.isfinite(float(v)) for v in diagnostics.values())


def test_ess_falls_with_the_dimension():
    """At the same lag per dimension, the joint ratio of 6 dimensions has a
    lower ESS / N than that of 1 (in expectation the product of the
    per-dimension ones; arXiv 1905.02363), and its log ρ spreads wider."""
    ess, spread = {}, {}
    for dim in (1, 6):
        batch = make_batch(dim, lag=0.3, seed=5)
        _, diagnostics = loss_of(batch, "diagonal_gaussian")
        ess[dim] = float(diagnostics["ess_fraction"])
        spread[dim] = np.abs(np.log(reference(batch)[1])).mean()
    assert ess[6] < ess[1] and spread[6] > spread[1]


def test_vtrace_targets_take_a_gaussian_head():
    batch = make_batch(6, lag=0.4, seed=6)
    mu, pi, actions, dist_class = heads_of(batch, "diagonal_gaussian")
    targets = vtrace_targets(mu, pi, actions, batch["discounts"],
                             batch["rewards"], batch["values"],
                             batch["bootstrap_value"], dist_class=dist_class,
                             **CLIPS)
    log_rhos = (gaussian_log_prob(batch["mean_pi"], batch["log_std_pi"], actions)
                - gaussian_log_prob(batch["mean_mu"], batch["log_std_mu"], actions))
    vs, pg = vtrace_reference(log_rhos, batch["discounts"], batch["rewards"],
                              batch["values"], batch["bootstrap_value"], **CLIPS)
    np.testing.assert_allclose(targets.log_rhos, log_rhos, rtol=1e-9)
    np.testing.assert_allclose(targets.vs, vs, rtol=1e-9)
    np.testing.assert_allclose(targets.pg_advantages, pg, rtol=1e-9)


# --- ESS / N against its definition -------------------------------------------


def test_ess_fraction_is_its_definition_and_survives_overflow():
    rng = np.random.default_rng(7)
    log_rhos = rng.normal(0, 1.5, (T, B))
    mask = rng.random((T, B)) < 0.8
    logits = np.zeros((T, B, 3))

    def diagnostics(log_rhos, dtype):
        # log μ(a) given directly: log ρ is exactly the one asked for.
        return impala_loss(
            None, logits.astype(dtype), np.zeros((T, B), np.int32),
            np.full((T, B), 0.9, dtype), np.ones((T, B), dtype),
            np.zeros((T, B), dtype), np.zeros(B, dtype), mask=mask,
            behaviour_action_log_probs=(np.log(1 / 3) - log_rhos).astype(dtype))[1]

    rhos = np.exp(log_rhos[mask])
    np.testing.assert_allclose(
        float(diagnostics(log_rhos, np.float64)["ess_fraction"]),
        rhos.sum() ** 2 / (rhos.size * (rhos ** 2).sum()), rtol=1e-12)
    # One ratio of e^200 (inf in float32): one step carries all the weight.
    log_rhos[0, 0], mask[0, 0] = 200., True
    got = float(diagnostics(log_rhos, np.float32)["ess_fraction"])
    np.testing.assert_allclose(got, 1 / mask.sum(), rtol=1e-5)
    # On-policy: every ρ = 1, ESS / N = 1.
    np.testing.assert_allclose(
        float(diagnostics(np.zeros((T, B)), np.float32)["ess_fraction"]), 1.0,
        rtol=1e-6)


# --- Bad shapes: one clear line ------------------------------------------------


def test_mis_shaped_gaussian_inputs_are_refused():
    batch = make_batch(6, lag=0.3)
    mu, pi, actions, _ = heads_of(batch, "diagonal_gaussian")
    common = (batch["discounts"], batch["rewards"], batch["values"],
              batch["bootstrap_value"])
    with pytest.raises(ValueError, match=r"`actions` must be `values`' shape plus "
                                         r"the event shape \(6,\)"):
        impala_loss(mu, pi, actions[..., :2], *common, dist_class=diagonal_gaussian)
    with pytest.raises(ValueError, match="one log-prob per step.*Independent"):
        impala_loss(mu, pi, actions, *common,
                    dist_class=lambda p: tfd.Normal(p[..., ::2], tf.exp(p[..., 1::2])))
    with pytest.raises(ValueError, match="an even last axis"):
        impala_loss(mu[..., :-1], pi[..., :-1], actions, *common,
                    dist_class=diagonal_gaussian)
    with pytest.raises(ValueError, match=r"must be \[\.\.\., 2\]"):
        normal(np.zeros((T, B, 3)))


# --- tf_vtrace.distributions ---------------------------------------------------


def test_the_two_layouts_are_one_distribution():
    rng = np.random.default_rng(8)
    mean, log_std = rng.normal(size=(5, 4)), rng.normal(-1, 0.3, size=(4,))
    params = gaussian_params(mean, log_std)  # a state-independent log-std
    np.testing.assert_array_equal(params[:, 0::2], mean)
    np.testing.assert_array_equal(params[:, 1::2], np.broadcast_to(log_std, (5, 4)))
    actions = rng.normal(size=(5, 4))
    joint = diagonal_gaussian(params)
    per_dim = [normal(params[:, 2 * d:2 * d + 2]) for d in range(4)]
    want = gaussian_log_prob(mean, np.broadcast_to(log_std, (5, 4)), actions)
    np.testing.assert_allclose(joint.log_prob(actions), want, rtol=1e-12)
    np.testing.assert_allclose(
        sum(h.log_prob(actions[:, d]) for d, h in enumerate(per_dim)), want,
        rtol=1e-12)
    np.testing.assert_allclose(joint.entropy(),
                               gaussian_entropy(np.broadcast_to(log_std, (5, 4))),
                               rtol=1e-12)


def test_distributions_doctests():
    assert doctest.testmod(tf_vtrace.distributions).failed == 0
