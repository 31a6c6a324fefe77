"""tf_vtrace.agent.policies and the Gaussian head, against float64 definitions.

Categorical heads must agree with the ones the agent uses today (actor's
Gumbel-max sampler, the loss's log-probs); the Gaussian's log π, H, KL are
written per dimension from their formulas; samplers are checked by their
moments over many draws with bounds from the draws' own standard error.
"""
import gymnasium as gym
import keras
import numpy as np
import pytest
import tensorflow as tf
from vtrace_reference import categorical_log_probs, log_softmax

from tf_vtrace.agent import actor, policies
from tf_vtrace.agent._gaussian_head import GaussianHead, gaussian_head_numpy
from tf_vtrace.impala import impala_loss

HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


def gaussian_params(rng, shape, dim):
    mean = rng.normal(size=shape + (dim,))
    log_std = rng.normal(-0.7, 0.3, size=shape + (dim,))
    return mean, log_std, np.stack([mean, log_std], -1).reshape(shape + (2 * dim,))


# --- The policy of each action space -------------------------------------------


def test_for_action_space():
    discrete = policies.for_action_space(gym.spaces.Discrete(4))
    assert (discrete.param_size, discrete.action_shape) == (4, (1,))
    multi = policies.for_action_space(gym.spaces.MultiDiscrete([2, 3]))
    assert (multi.param_size, multi.action_shape) == (5, (2,))
    box = policies.for_action_space(gym.spaces.Box(-2., 2., (6,)))
    assert isinstance(box, policies.DiagonalGaussian)
    assert (box.param_size, box.action_shape, box.action_dtype) == (12, (6,), np.float32)
    with pytest.raises(ValueError, match="finite bounds"):
        policies.for_action_space(gym.spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ValueError, match="1-D Box"):
        policies.for_action_space(gym.spaces.Box(-1., 1., (2, 2)))


# --- Categorical heads: the same numbers as today's agent ----------------------


def test_categorical_log_prob_entropy_kl_against_float64():
    rng = np.random.default_rng(0)
    policy = policies.CategoricalHeads((2, 3))
    mu, pi = rng.normal(size=(2, 7, 4, 5))
    actions = np.stack([np.arange(28).reshape(7, 4) % 2,
                        np.arange(28).reshape(7, 4) % 3], -1).astype(np.int32)
    heads = [slice(0, 2), slice(2, 5)]
    want = sum(categorical_log_probs(pi[..., h], actions[..., k])
               for k, h in enumerate(heads))
    np.testing.assert_allclose(policy.log_prob(pi, actions), want, rtol=1e-12)
    entropy = sum(-(np.exp(log_softmax(pi[..., h])) * log_softmax(pi[..., h])).sum(-1)
                  for h in heads)
    np.testing.assert_allclose(policy.entropy(pi), entropy, rtol=1e-12)
    kl = sum((np.exp(log_softmax(mu[..., h]))
              * (log_softmax(mu[..., h]) - log_softmax(pi[..., h]))).sum(-1)
             for h in heads)
    np.testing.assert_allclose(policy.kl(mu, pi), kl, rtol=1e-10)


def test_categorical_numpy_sampler_is_the_actors():
    policy = policies.CategoricalHeads((2, 3))
    logits = np.random.default_rng(1).normal(size=(64, 5)).astype(np.float32)
    np.testing.assert_array_equal(
        policy.sample_numpy(logits, np.random.default_rng(2)),
        actor.sample_actions(logits, (2, 3), np.random.default_rng(2)))
    discrete = policies.CategoricalHeads((5,), scalar=True)
    draws = discrete.sample_numpy(logits, np.random.default_rng(3))
    assert draws.shape == (64, 1) and discrete.to_env(draws).shape == (64,)
    np.testing.assert_array_equal(discrete.greedy_numpy(logits)[:, 0],
                                  logits.argmax(-1))


@pytest.mark.parametrize("sampler", ["tf", "numpy"])
def test_categorical_samples_follow_the_softmax(sampler):
    policy = policies.CategoricalHeads((3, 2))
    logits = np.array([[0.5, -1.0, 1.5, 0.3, -0.2]], np.float32)
    n = 20000
    batch = np.repeat(logits, n, 0)
    draws = (policy.sample(tf.constant(batch), tf.constant([4, 5])).numpy()
             if sampler == "tf" else policy.sample_numpy(batch, np.random.default_rng(4)))
    for k, h in enumerate([slice(0, 3), slice(3, 5)]):
        probs = np.exp(log_softmax(logits[0, h]))
        freq = np.bincount(draws[:, k], minlength=len(probs)) / n
        bound = 5 * np.sqrt(probs * (1 - probs) / n)  # 5 standard errors
        assert (np.abs(freq - probs) < bound).all(), (freq, probs)


def test_categorical_loss_heads_give_impala_loss_its_inputs():
    rng = np.random.default_rng(5)
    policy = policies.CategoricalHeads((2, 3))
    mu, pi = rng.normal(size=(2, 6, 3, 5)).astype(np.float32)
    actions = policy.sample_numpy(mu.reshape(-1, 5), rng).reshape(6, 3, 2)
    mu_heads, action_heads, dist_class = policy.loss_heads(mu, actions)
    pi_heads, _, _ = policy.loss_heads(pi, actions)
    common = (np.full((6, 3), 0.9, np.float32), np.ones((6, 3), np.float32),
              np.zeros((6, 3), np.float32), np.zeros(3, np.float32))
    loss, _ = impala_loss(mu_heads, pi_heads, action_heads, *common,
                          dist_class=dist_class)
    want, _ = impala_loss([mu[..., :2], mu[..., 2:]], [pi[..., :2], pi[..., 2:]],
                          [actions[..., 0], actions[..., 1]], *common)
    np.testing.assert_allclose(float(loss), float(want), rtol=1e-6)


# --- The diagonal Gaussian -----------------------------------------------------


def test_gaussian_log_prob_entropy_kl_against_float64():
    rng = np.random.default_rng(6)
    policy = policies.DiagonalGaussian(-np.ones(4), np.ones(4))
    mean_mu, log_std_mu, mu = gaussian_params(rng, (7, 3), 4)
    mean_pi, log_std_pi, pi = gaussian_params(rng, (7, 3), 4)
    actions = mean_mu + np.exp(log_std_mu) * rng.normal(size=mean_mu.shape)
    z = (actions - mean_pi) / np.exp(log_std_pi)
    np.testing.assert_allclose(policy.log_prob(pi, actions),
                               (-0.5 * z ** 2 - log_std_pi - HALF_LOG_2PI).sum(-1),
                               rtol=1e-12)
    np.testing.assert_allclose(policy.entropy(pi),
                               (HALF_LOG_2PI + 0.5 + log_std_pi).sum(-1), rtol=1e-12)
    var_mu, var_pi = np.exp(2 * log_std_mu), np.exp(2 * log_std_pi)
    kl = (log_std_pi - log_std_mu + (var_mu + (mean_mu - mean_pi) ** 2)
          / (2 * var_pi) - 0.5).sum(-1)
    np.testing.assert_allclose(policy.kl(mu, pi), kl, rtol=1e-10)
    np.testing.assert_allclose(policy.greedy(pi), mean_pi)
    np.testing.assert_allclose(policy.greedy_numpy(pi), mean_pi.astype(np.float32))


@pytest.mark.parametrize("sampler", ["tf", "numpy"])
def test_gaussian_samples_have_the_mean_and_std(sampler):
    policy = policies.DiagonalGaussian(-1., 1., dim=3)
    mean = np.array([0.5, -2.0, 0.0], np.float32)
    log_std = np.array([-1.0, 0.0, 0.7], np.float32)
    params = np.repeat(np.stack([mean, log_std], -1).reshape(1, 6), 20000, 0)
    draws = (policy.sample(tf.constant(params), tf.constant([7, 8])).numpy()
             if sampler == "tf" else policy.sample_numpy(params, np.random.default_rng(9)))
    assert draws.dtype == np.float32 and draws.shape == (20000, 3)
    std = np.exp(log_std)
    # Unsquashed: draws leave the space; 5 standard errors of mean and std.
    assert (np.abs(draws) > 1).any()
    assert (np.abs(draws.mean(0) - mean) < 5 * std / np.sqrt(20000)).all()
    assert (np.abs(draws.std(0) / std - 1) < 5 / np.sqrt(2 * 20000)).all()


def test_gaussian_actions_are_clipped_only_for_the_env():
    policy = policies.for_action_space(gym.spaces.Box(
        np.array([-2., 0.], np.float32), np.array([2., 1.], np.float32)))
    actions = np.array([[-3., 0.5], [1., 4.]], np.float32)
    np.testing.assert_array_equal(policy.to_env(actions), [[-2., 0.5], [1., 1.]])
    np.testing.assert_array_equal(actions, [[-3., 0.5], [1., 4.]])  # untouched
    with pytest.raises(ValueError, match=r"must be \[\.\.\., 4\]"):
        policy.log_prob(np.zeros((3, 6)), np.zeros((3, 2)))


def test_gaussian_loss_heads_give_impala_loss_a_joint_log_rho():
    rng = np.random.default_rng(10)
    policy = policies.DiagonalGaussian(-1., 1., dim=6)
    mu, pi = (gaussian_params(rng, (5, 2), 6)[2].astype(np.float32) for _ in range(2))
    actions = policy.sample_numpy(mu.reshape(10, 12), rng).reshape(5, 2, 6)
    heads = [policy.loss_heads(p, actions) for p in (mu, pi)]
    loss, diagnostics = impala_loss(
        heads[0][0], heads[1][0], heads[1][1], np.full((5, 2), 0.9, np.float32),
        np.ones((5, 2), np.float32), np.zeros((5, 2), np.float32),
        np.zeros(2, np.float32), dist_class=heads[1][2])
    log_rhos = (policy.log_prob(pi, actions) - policy.log_prob(mu, actions)).numpy()
    np.testing.assert_allclose(float(diagnostics["mean_rho"]),
                               np.exp(log_rhos).mean(), rtol=1e-5)
    assert np.isfinite(float(loss))


# --- The Keras 3 Gaussian head -------------------------------------------------


@pytest.mark.parametrize("state_dependent", [False, True])
def test_gaussian_head_and_its_numpy_twin(state_dependent, tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5,))
    head = GaussianHead(3, state_dependent_std=state_dependent, initial_log_std=-0.5,
                        name="gaussian")
    model = keras.Model(inputs, head(keras.layers.Dense(4, name="torso")(inputs)))
    features_model = keras.Model(inputs, model.get_layer("torso").output)
    observations = np.random.default_rng(11).normal(size=(8, 5)).astype(np.float32)
    params = model(observations).numpy()
    assert params.shape == (8, 6)
    if not state_dependent:  # the learned vector, the same in every state
        np.testing.assert_allclose(params[:, 1::2], -0.5)
    weights = {v.path.split("/", 1)[1]: v.numpy() for v in model.weights
               if v.path.startswith("gaussian/")}
    np.testing.assert_allclose(
        gaussian_head_numpy(features_model(observations).numpy(), weights),
        params, rtol=1e-5, atol=1e-6)
    # The log-std gets a gradient (it is learned) and survives a .keras file.
    with tf.GradientTape() as tape:
        out = model(observations)
        loss = tf.reduce_sum(out[:, 1::2])
    grads = tape.gradient(loss, model.trainable_weights)
    assert all(g is not None for g in grads)
    model.save(tmp_path / "m.keras")
    np.testing.assert_allclose(keras.models.load_model(tmp_path / "m.keras")(observations),
                               params, rtol=1e-6)
