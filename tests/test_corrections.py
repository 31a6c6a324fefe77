"""The four off-policy corrections (tf_vtrace.agent.corrections) against
float64 NumPy transcriptions of their formulas, on lagged data: μ ≠ π, with
ρ above and below ρ̄ = c̄ = 1, terminals and time-limit truncations.

Checked per correction: the value target vs, the advantage, the loss, and
the gradients of the loss with respect to π's logits (the policy-gradient
term: the baseline does not touch the logits, entropy_cost is 0) and to V
(the baseline term: −baseline_cost (vs − V) / (T·B))."""
import numpy as np
import pytest
import tensorflow as tf
from vtrace_reference import categorical_log_probs

from tf_vtrace.agent import corrections
from tf_vtrace.agent.config import Config

T, B, A = 7, 4, 3
BASELINE_COST = 0.5


@pytest.fixture(scope="module")
def lagged():
    """float64 numpy data of a behaviour policy far from the target."""
    rng = np.random.default_rng(3)
    behaviour = rng.normal(0, 1.5, (T, B, A))
    target = rng.normal(0, 1.5, (T, B, A))
    # Uniform actions (the formulas hold for any): ρ spreads on both sides.
    actions = rng.integers(0, A, (T, B))
    discounts = np.where(rng.random((T, B)) < 0.15, 0., 0.9)
    truncated = (rng.random((T, B)) < 0.15) & (discounts > 0)
    data = dict(behaviour=behaviour, target=target, actions=actions,
                discounts=discounts, rewards=rng.normal(size=(T, B)),
                values=rng.normal(size=(T, B)), bootstrap=rng.normal(size=B),
                truncated=truncated, final_values=rng.normal(size=(T, B)))
    rhos = np.exp(categorical_log_probs(target, actions)
                  - categorical_log_probs(behaviour, actions))
    # Lag is active and clipping bites on both sides of ρ̄ = 1.
    assert (rhos > 1.5).sum() >= 3 and (rhos < 0.5).sum() >= 3
    assert truncated.any() and (discounts == 0).any()
    return data, rhos


def reference_targets(data, rhos, rho_bar=1.0, c_bar=1.0, lambda_=1.0):
    """V-trace's backward recursion (Espeholt et al. 2018, remark 1):
    vs_t = V_t + min(ρ̄, ρ_t) δ_t + γ_t c_t (vs_{t+1} − V_{t+1}),
    c_t = λ min(c̄, ρ_t) (remark 2),
    δ_t = r_t + γ_t V_{t+1} − V_t; A_t = min(ρ̄, ρ_t)(r_t + γ_t vs_{t+1} − V_t).
    A truncated step ends its trace: r_t + γ_t V(final obs), then γ = 0."""
    rewards = np.where(data["truncated"],
                       data["rewards"] + data["discounts"] * data["final_values"],
                       data["rewards"])
    discounts = np.where(data["truncated"], 0., data["discounts"])
    values = data["values"]
    next_values = np.concatenate([values[1:], data["bootstrap"][None]])
    clipped_rho = np.minimum(rho_bar, rhos)
    clipped_c = lambda_ * np.minimum(c_bar, rhos)
    vs = np.zeros((T, B))
    next_vs = data["bootstrap"]
    for t in reversed(range(T)):
        delta = rewards[t] + discounts[t] * next_values[t] - values[t]
        vs[t] = (values[t] + clipped_rho[t] * delta
                 + discounts[t] * clipped_c[t] * (next_vs - next_values[t]))
        next_vs = vs[t]
    shifted_vs = np.concatenate([vs[1:], data["bootstrap"][None]])
    advantages = clipped_rho * (rewards + discounts * shifted_vs - values)
    return vs, advantages


def reference(correction, data, rhos, epsilon, lambda_=1.0):
    """(vs, A, loss, d loss / d logits, d loss / d V) of `correction`.

    The policy-gradient term is −ψ_t A_t with ψ_t = w_t log f(π(a_t)); its
    logit gradient is −A_t w_t f'(π)π/f(π) (onehot(a_t) − π):
    vtrace, none: w = 1, f = π;  is1: w = ρ_t (unclipped), f = π;
    epsilon: w = 1, f = π + ε."""
    vs, advantages = reference_targets(
        data, rhos if correction == "vtrace" else np.ones_like(rhos),
        lambda_=lambda_)
    logits = data["target"]
    pi = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    onehot = np.eye(A)[data["actions"]]
    pi_a = (pi * onehot).sum(-1)
    weight = rhos if correction == "is1" else np.ones_like(rhos)
    if correction == "epsilon":
        score, slope = np.log(pi_a + epsilon), pi_a / (pi_a + epsilon)
    else:
        score, slope = np.log(pi_a), np.ones_like(pi_a)
    n = T * B
    loss = (-(weight * score * advantages).sum()
            + BASELINE_COST * 0.5 * ((vs - data["values"]) ** 2).sum()) / n
    d_logits = -(weight * slope * advantages)[..., None] * (onehot - pi) / n
    d_values = -BASELINE_COST * (vs - data["values"]) / n
    return vs, advantages, loss, d_logits, d_values


def run(correction, data, epsilon, lambda_=1.0):
    as32 = lambda x: tf.constant(x, tf.float32)  # noqa: E731
    target, values = as32(data["target"]), as32(data["values"])
    inputs = corrections.CorrectionInputs(
        [as32(data["behaviour"])], [target], [tf.constant(data["actions"])],
        as32(data["discounts"]), as32(data["rewards"]), values,
        as32(data["bootstrap"]), tf.constant(data["truncated"]),
        as32(data["final_values"]))
    with tf.GradientTape() as tape:
        tape.watch([target, values])
        loss, diagnostics = corrections.correction_loss(
            correction, inputs, dict(baseline_cost=BASELINE_COST,
                                     entropy_cost=0.), epsilon=epsilon,
            lambda_=lambda_)
    d_logits, d_values = tape.gradient(loss, [target, values])
    vs, advantages, _ = corrections.correction_targets(correction, inputs,
                                                       lambda_)
    return [np.asarray(x) for x in (vs, advantages, loss, d_logits, d_values)
            ], diagnostics


# ε large enough that log(π + ε) differs visibly from log π in float32.
@pytest.mark.parametrize("correction, epsilon", [
    ("vtrace", 1e-6), ("none", 1e-6), ("is1", 1e-6), ("epsilon", 0.2)])
def test_correction_matches_its_formula_on_lagged_data(lagged, correction,
                                                       epsilon):
    data, rhos = lagged
    got, _ = run(correction, data, epsilon)
    want = reference(correction, data, rhos, epsilon)
    for name, g, w in zip(("vs", "A", "loss", "d/dlogits", "d/dV"), got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6, err_msg=name)


@pytest.mark.parametrize("correction", corrections.CORRECTIONS)
def test_lambda_cuts_the_traces_as_its_formula_does(lagged, correction):
    """λ = 0.6 against the recursion with c_t = λ min(c̄, ρ_t); the targets
    move by far more than the tolerance from λ = 1's."""
    data, rhos = lagged
    got, _ = run(correction, data, 0.2, lambda_=0.6)
    want = reference(correction, data, rhos, 0.2, lambda_=0.6)
    for name, g, w in zip(("vs", "A", "loss", "d/dlogits", "d/dV"), got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6, err_msg=name)
    assert np.abs(got[0] - run(correction, data, 0.2)[0][0]).max() > 0.1


def test_config_vtrace_lambda_range():
    assert Config().vtrace_lambda == 1.0
    assert Config(vtrace_lambda=0.).vtrace_lambda == 0.
    with pytest.raises(ValueError, match=r"Config\.vtrace_lambda must be in \[0, 1\]"):
        Config(vtrace_lambda=1.5)


def test_corrections_differ_where_their_formulas_do(lagged):
    """Each pair differs by far more than the tolerance above: the tests
    of the formulas can tell them apart."""
    data, _ = lagged
    grads = {c: run(c, data, 0.2)[0][3] for c in corrections.CORRECTIONS}
    value_targets = {c: run(c, data, 0.2)[0][0] for c in ("vtrace", "none")}
    assert np.abs(value_targets["vtrace"] - value_targets["none"]).max() > 0.1
    for a in corrections.CORRECTIONS:
        for b in corrections.CORRECTIONS:
            if a < b:
                assert np.abs(grads[a] - grads[b]).max() > 1e-3, (a, b)


def test_diagnostics_report_the_real_rho_whatever_the_correction(lagged):
    data, rhos = lagged
    ess = rhos.sum() ** 2 / (rhos ** 2).sum()
    for correction in corrections.CORRECTIONS:
        _, diagnostics = run(correction, data, 1e-6)
        np.testing.assert_allclose(float(diagnostics["mean_rho"]), rhos.mean(),
                                   rtol=1e-5)
        np.testing.assert_allclose(float(diagnostics["ess_fraction"]),
                                   ess / (T * B), rtol=1e-5)
        np.testing.assert_allclose(float(diagnostics["rho_clipped_fraction"]),
                                   (rhos > np.exp(1e-3)).mean())
    assert 1 < ess < 0.9 * T * B  # lagged data: well below T·B


def test_config_correction_choices_and_bool_aliases():
    assert Config().correction == "vtrace"
    assert Config(correction=True).correction == "vtrace"
    assert Config(correction=False).correction == "none"
    with pytest.raises(ValueError, match=r"Config\.correction.*'is1'"):
        Config(correction="retrace")
    with pytest.raises(ValueError, match=r"`correction` must be one of"):
        corrections.correction_targets("retrace", None)
