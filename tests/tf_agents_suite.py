"""`tf_vtrace.tf_agents.ImpalaAgent` with real TF-Agents 0.19, in its own process.

Not collected by the main test run (the name does not start with `test_`):
tests/test_tf_agents.py runs this module with pytest in a subprocess with
`TF_USE_LEGACY_KERAS=1`, which must be set before TensorFlow is imported and
then holds for the whole process.

Environments are real: gym 0.23 CartPole through TF-Agents' `suite_gym` (with
TF-Agents' `TimeLimit`, so that both terminated and truncated episodes occur)
and TF-Agents' `RandomPyEnvironment` for a tuple action spec; data come from
TF-Agents' `DynamicStepDriver` into a `TFUniformReplayBuffer`. The loss is
checked against the float64 reference of tests/vtrace_reference.py.
"""
import os

if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    raise RuntimeError("run through tests/test_tf_agents.py (TF_USE_LEGACY_KERAS=1)")

import doctest
import json
import subprocess
import sys
import textwrap

import gym
import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from tf_agents.drivers import dynamic_step_driver
from tf_agents.environments import (
    batched_py_environment,
    random_py_environment,
    suite_gym,
    tf_py_environment,
    wrappers,
)
from tf_agents.networks import (
    actor_distribution_network,
    actor_distribution_rnn_network,
    sequential,
    value_network,
    value_rnn_network,
)
from tf_agents.policies import policy_saver
from tf_agents.replay_buffers import tf_uniform_replay_buffer
from tf_agents.specs import array_spec
from tf_agents.trajectories import time_step as ts
from tf_agents.utils import common
from tolerances import SUBPROCESS_TIMEOUT_S
from vtrace_reference import categorical_log_probs, log_softmax, vtrace_reference

import tf_vtrace.tf_agents
from tf_vtrace.tf_agents import ImpalaAgent

N_ENVS, TIME_LIMIT = 4, 20  # random CartPole episodes last ≈ 22 steps


def test_legacy_keras_is_active():
    assert tf.keras.layers.Layer.__module__.startswith("tf_keras")


def test_module_doctests():
    assert doctest.testmod(tf_vtrace.tf_agents).failed == 0


# --- Environments, agents, data ---------------------------------------------


def cartpole_env():
    # gym's own TimeLimit (500 steps) is stripped: TF-Agents' TimeLimit marks
    # its step limit as a truncation (discount 1), gym's as a termination.
    return tf_py_environment.TFPyEnvironment(
        batched_py_environment.BatchedPyEnvironment([
            suite_gym.wrap_env(gym.make("CartPole-v1").unwrapped,
                               max_episode_steps=TIME_LIMIT)
            for _ in range(N_ENVS)]))


def multi_head_env():
    action_spec = (array_spec.BoundedArraySpec((), np.int32, 0, 2),
                   array_spec.BoundedArraySpec((2,), np.int64, 0, 3))
    return _random_env(action_spec,
                       lambda step_type, action, obs: np.float32(obs.sum()))


def _random_env(action_spec, reward_fn):
    """N_ENVS random environments of 3-D observations in a batched TF env."""
    observation_spec = array_spec.BoundedArraySpec((3,), np.float32, -1., 1.)
    return tf_py_environment.TFPyEnvironment(
        batched_py_environment.BatchedPyEnvironment([
            random_py_environment.RandomPyEnvironment(
                observation_spec, action_spec, episode_end_probability=0.15,
                discount=1.0, min_duration=3, seed=seed, reward_fn=reward_fn)
            for seed in range(N_ENVS)]))


def pendulum_env():
    """gym 0.23's Pendulum-v1 (one continuous action in [−2, 2]); the
    environment gets the actions clipped, the trajectories keep them as drawn."""
    return tf_py_environment.TFPyEnvironment(
        batched_py_environment.BatchedPyEnvironment([
            wrappers.ActionClipWrapper(suite_gym.wrap_env(
                gym.make("Pendulum-v1").unwrapped, max_episode_steps=TIME_LIMIT))
            for _ in range(N_ENVS)]))


def continuous_env(dim=6):
    action_spec = array_spec.BoundedArraySpec((dim,), np.float32, -1., 1.)
    return _random_env(action_spec, lambda step_type, action, obs: np.float32(
        obs.sum() - np.square(action).sum()))


def make_agent(env, seed=0, logits_network=False, optimizer=None, recurrent=(),
               **options):
    """An agent with small networks; `recurrent` names the LSTM ones
    ("actor", "value"), the others are feed-forward."""
    # tf_keras' unseeded initializers draw their seeds from Python's `random`
    # (seeded from the OS at start), not from `tf.random.set_seed`: with that
    # alone each process got other weights, and a CI run of the saver round
    # trip met a greedy policy that took one action only (7 December 2026).
    tf_keras.utils.set_random_seed(seed)
    observation_spec, action_spec = env.observation_spec(), env.action_spec()
    if logits_network:  # any Network that outputs logits will do
        actor = sequential.Sequential([
            tf_keras.layers.Dense(16, activation="tanh"),
            tf_keras.layers.Dense(int(action_spec.maximum) + 1)])
    elif "actor" in recurrent:
        actor = actor_distribution_rnn_network.ActorDistributionRnnNetwork(
            observation_spec, action_spec, input_fc_layer_params=(16,),
            lstm_size=(8,), output_fc_layer_params=())
    else:
        actor = actor_distribution_network.ActorDistributionNetwork(
            observation_spec, action_spec, fc_layer_params=(16,))
    if "value" in recurrent:
        value = value_rnn_network.ValueRnnNetwork(
            observation_spec, input_fc_layer_params=(16,), lstm_size=(8,),
            output_fc_layer_params=())
    else:
        value = value_network.ValueNetwork(observation_spec, fc_layer_params=(16,))
    return ImpalaAgent(
        env.time_step_spec(), action_spec, actor, value,
        optimizer or tf_keras.optimizers.Adam(1e-2),
        train_step_counter=tf.Variable(0, dtype=tf.int64), **options)


def collect(agent, env, steps_per_env):
    """Runs the collect policy with TF-Agents' driver; returns the buffer."""
    replay_buffer = tf_uniform_replay_buffer.TFUniformReplayBuffer(
        agent.collect_data_spec, batch_size=env.batch_size, max_length=1000)
    dynamic_step_driver.DynamicStepDriver(
        env, agent.collect_policy, observers=[replay_buffer.add_batch],
        num_steps=env.batch_size * steps_per_env).run()
    return replay_buffer


def windows(replay_buffer, length, batch_size=8):
    dataset = replay_buffer.as_dataset(sample_batch_size=batch_size,
                                       num_steps=length)
    experience, _ = next(iter(dataset))
    return experience


@pytest.fixture(scope="module")
def cartpole():
    env = cartpole_env()
    agent = make_agent(env)
    return env, agent, collect(agent, env, 60)


def snapshot(variables):
    return [v.numpy().copy() for v in variables]


def trainable(agent):
    return (agent.actor_network.trainable_variables
            + agent.value_network.trainable_variables)


# --- Training ------------------------------------------------------------------


@pytest.mark.parametrize("logits_network", [False, True],
                         ids=["ActorDistributionNetwork", "logits_network"])
def test_one_train_step_changes_every_weight_and_counts_once(logits_network):
    env = cartpole_env()
    agent = make_agent(env, logits_network=logits_network, entropy_cost=0.01)
    experience = windows(collect(agent, env, 30), length=11)
    before = snapshot(trainable(agent))
    loss_info = agent.train(experience)
    assert np.isfinite(loss_info.loss.numpy())
    assert int(agent.train_step_counter) == 1
    after = snapshot(trainable(agent))
    assert len(before) == 4 + 4 and all(
        not np.array_equal(b, a) for b, a in zip(before, after))
    agent.train(experience)
    assert int(agent.train_step_counter) == 2
    # Checkpoints and savers see the weights: the Keras 3 failure mode.
    assert len(agent.policy.variables()) == len(agent.collect_policy.variables()) == 4


def test_multi_head_tuple_action_spec_trains():
    env = multi_head_env()
    agent = make_agent(env, entropy_cost=0.01, kl_cost=0.1)
    experience = windows(collect(agent, env, 30), length=9)
    logits = experience.policy_info["behaviour_logits"]
    assert isinstance(logits, tuple) and len(logits) == 2
    assert logits[0].shape == (8, 9, 3) and logits[1].shape == (8, 9, 2, 4)
    before = snapshot(trainable(agent))
    loss_info = agent.train(experience)
    assert np.isfinite(loss_info.loss.numpy())
    assert all(not np.array_equal(b, a)
               for b, a in zip(before, snapshot(trainable(agent))))


def test_behaviour_logits_in_policy_info_are_the_actors_logits(cartpole):
    env, agent, replay_buffer = cartpole
    fresh = make_agent(env)
    experience = windows(collect(fresh, env, 20), length=6)
    time_steps = ts.TimeStep(experience.step_type, experience.reward,
                             experience.discount, experience.observation)
    recorded = experience.policy_info["behaviour_logits"]
    collect_logits = fresh.collect_policy.distribution(time_steps).action.logits
    np.testing.assert_allclose(recorded, collect_logits, rtol=1e-6, atol=1e-6)
    # After a step the learner's π moves away from the recorded μ, and the
    # loss sees it: its KL(μ‖π), a masked mean over steps, lies within the
    # per-step KLs of the two logits (float64 reference).
    # (Not mean ρ: E_μ[π/μ] = 1, so a sample mean near 1 is expected.)
    fresh.train(experience)
    moved = fresh.collect_policy.distribution(time_steps).action.logits
    assert np.abs(moved - recorded).max() > 1e-3
    log_mu = log_softmax(recorded)
    log_pi = log_softmax(moved)
    per_step_kl = (np.exp(log_mu) * (log_mu - log_pi)).sum(-1)
    kl = float(fresh.loss(experience).extra.kl)
    assert per_step_kl.min() - 1e-6 <= kl <= per_step_kl.max() + 1e-6
    assert per_step_kl.max() > 1e-6


def test_gradient_clipping_bounds_the_global_norm(cartpole):
    env, _, replay_buffer = cartpole
    clip = 1e-3
    agent = make_agent(env, optimizer=tf_keras.optimizers.SGD(1.0),
                       gradient_clipping=clip)
    experience = windows(replay_buffer, length=11)
    before = snapshot(trainable(agent))
    agent.train(experience)
    step = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in
                       zip(snapshot(trainable(agent)), before)))
    np.testing.assert_allclose(step, clip, rtol=1e-3)  # SGD(1): Δw = −g


def test_bad_arguments_are_refused(cartpole):
    env, agent, replay_buffer = cartpole
    with pytest.raises(ValueError, match="weights"):
        agent.train(windows(replay_buffer, length=4), weights=tf.ones([8]))
    with pytest.raises(ValueError, match="T \\+ 1 ≥ 2"):
        agent.train(windows(replay_buffer, length=1))
    with pytest.raises(ValueError, match="reduction"):
        make_agent(env, reduction="avg")
    # The V-trace hyperparameters and the costs, when the agent is made.
    with pytest.raises(ValueError, match="`clip_rho_threshold` must be a positive"):
        make_agent(env, clip_rho_threshold=0.)
    with pytest.raises(ValueError, match=r"`lambda_` must be in \[0, 1\]"):
        make_agent(env, lambda_=1.5)
    with pytest.raises(TypeError, match="`entropy_cost` must be a number, got 'x'"):
        make_agent(env, entropy_cost="x")
    from tf_agents.specs import tensor_spec
    with pytest.raises(ValueError, match="minimum 0"):
        ImpalaAgent(env.time_step_spec(),
                    tensor_spec.BoundedTensorSpec((), tf.int64, 1, 2),
                    agent.actor_network, agent.value_network,
                    tf_keras.optimizers.Adam())


def test_summaries_are_written(cartpole, tmp_path):
    env, _, replay_buffer = cartpole
    agent = make_agent(env, debug_summaries=True, summarize_grads_and_vars=True)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        agent.train(windows(replay_buffer, length=11))
    writer.flush()
    tags = set()
    for path in tmp_path.iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            tags.update(value.tag for value in event.summary.value)
    expected = {"Losses/loss", "Losses/policy_loss", "Losses/baseline_loss",
                "Losses/entropy_loss", "Losses/kl_loss",
                "Losses/regularization_loss", "VTrace/mean_rho",
                "VTrace/rho_clipped_fraction", "VTrace/entropy", "VTrace/vs",
                "VTrace/rho", "VTrace/pg_advantages",
                "VTrace/gradient_global_norm"}
    assert expected <= tags, expected - tags
    assert any("gradient" in tag and "EncodingNetwork" in tag for tag in tags), tags


# --- The loss against the float64 reference ----------------------------------


def softmax64(logits):
    logits = np.asarray(logits, np.float64)
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def scalar_heads(nest, action_spec):
    """numpy: one [B, T, (n)] array per scalar action (a head of shape S has
    prod(S) independent actions); a continuous spec's arrays as they are."""
    heads = []
    for array, spec in zip(tf.nest.flatten(nest), tf.nest.flatten(action_spec)):
        array = np.asarray(array)
        if spec.dtype.is_floating:
            heads.append(array)
            continue
        rank, size = spec.shape.rank, spec.shape.num_elements()
        flat = array.reshape(array.shape[:2] + (size,) + array.shape[2 + rank:])
        heads += [flat[:, :, i] for i in range(size)]
    return heads


HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


def categorical_terms(mu, pi, actions):
    """Per step: log π(a), log μ(a), H(π), KL(μ‖π) of Categorical heads."""
    log_pi = sum(categorical_log_probs(p, a) for p, a in zip(pi, actions))
    log_mu = sum(categorical_log_probs(m, a) for m, a in zip(mu, actions))
    probs_pi = [softmax64(p) for p in pi]
    probs_mu = [softmax64(m) for m in mu]
    entropy = sum(-(q * np.log(q)).sum(-1) for q in probs_pi)
    kl = sum((qm * (np.log(qm) - np.log(qp))).sum(-1)
             for qm, qp in zip(probs_mu, probs_pi))
    return log_pi, log_mu, entropy, kl


def gaussian_terms(mu, pi, actions):
    """The same for one diagonal Gaussian head, parameters [..., 2·D] as
    (mean, log-std) pairs, from the formulas per dimension."""
    (mu,), (pi,), (actions,) = mu, pi, actions
    m_mu, s_mu, m_pi, s_pi = mu[..., 0::2], mu[..., 1::2], pi[..., 0::2], pi[..., 1::2]

    def log_prob(mean, log_std):
        z = (actions - mean) / np.exp(log_std)
        return (-0.5 * z ** 2 - log_std - HALF_LOG_2PI).sum(-1)

    entropy = (HALF_LOG_2PI + 0.5 + s_pi).sum(-1)
    kl = (s_pi - s_mu + (np.exp(2 * s_mu) + (m_mu - m_pi) ** 2)
          / (2 * np.exp(2 * s_pi)) - 0.5).sum(-1)
    return log_prob(m_pi, s_pi), log_prob(m_mu, s_mu), entropy, kl


def reference_loss(experience, target_logits, values, action_spec, gamma,
                   baseline_cost, entropy_cost, kl_cost, reduction, **clips):
    """The IMPALA loss of a batch, float64, written from the definitions.

    Each row is cut into its episode pieces at the boundary rows (the last
    step of an episode); a piece [s, e) is a plain V-trace unroll that
    bootstraps from V(x_e), the final observation of its episode (or the
    window's last observation), with γ·discount (0 after a termination).
    """
    step_type = experience.step_type.numpy()
    rewards = experience.reward.numpy().astype(np.float64)
    discounts = gamma * experience.discount.numpy().astype(np.float64)
    mu = [np.asarray(m, np.float64) for m in scalar_heads(
        experience.policy_info["behaviour_logits"], action_spec)]
    pi = [np.asarray(p, np.float64) for p in scalar_heads(target_logits, action_spec)]
    actions = scalar_heads(experience.action, action_spec)
    continuous = tf.nest.flatten(action_spec)[0].dtype.is_floating
    terms_of = gaussian_terms if continuous else categorical_terms
    values = np.asarray(values, np.float64)
    num_rows, length = step_type.shape
    terms = dict(policy_loss=0., baseline_loss=0., entropy_loss=0., kl_loss=0.)
    num_valid, rhos = 0, []
    for b in range(num_rows):
        valid = step_type[b, :-1] != ts.StepType.LAST
        t = 0
        while t < length - 1:
            if not valid[t]:
                t += 1
                continue
            s = t
            while t < length - 1 and valid[t]:
                t += 1
            piece = slice(s, t)
            log_pi, log_mu, entropy, kl = terms_of(
                [m[b, piece] for m in mu], [p[b, piece] for p in pi],
                [np.asarray(a[b, piece], np.float64 if continuous else np.int64)
                 for a in actions])
            vs, pg = vtrace_reference(
                log_pi - log_mu, discounts[b, piece], rewards[b, piece],
                values[b, piece], np.asarray(values[b, t]), **clips)
            terms["policy_loss"] += -(log_pi * pg).sum()
            terms["baseline_loss"] += baseline_cost * 0.5 * (
                (vs - values[b, piece]) ** 2).sum()
            terms["entropy_loss"] += -entropy_cost * entropy.sum()
            terms["kl_loss"] += kl_cost * kl.sum()
            num_valid += t - s
            rhos += list(np.exp(log_pi - log_mu))
    if reduction == "masked_mean":
        terms = {k: v / num_valid for k, v in terms.items()}
    return sum(terms.values()), terms, np.array(rhos)


def perturb(network, scale, seed):
    """Moves π away from the μ that collected the data, both ways."""
    rng = np.random.default_rng(seed)
    for variable in network.trainable_variables:
        variable.assign_add(rng.normal(0., scale, variable.shape).astype(np.float32))


@pytest.mark.parametrize("env_name,reduction", [("cartpole", "sum"),
                                                ("multi_head", "masked_mean")])
def test_loss_equals_the_float64_reference(env_name, reduction):
    env = cartpole_env() if env_name == "cartpole" else multi_head_env()
    options = dict(baseline_cost=0.3, entropy_cost=0.02, kl_cost=0.1,
                   reduction=reduction)
    clips = dict(clip_rho_threshold=1.2, clip_pg_rho_threshold=0.9,
                 clip_c_threshold=0.8, lambda_=0.9,
                 alpha_=1.0 if env_name == "cartpole" else 0.6)  # leaky too
    agent = make_agent(env, discount_factor=0.95, **options, **clips)
    everything = collect(agent, env, 60).gather_all()  # [N_ENVS, 60, ...]
    experience = tf.nest.map_structure(  # [3 · N_ENVS, 16, ...]
        lambda t: tf.concat([t[:, s:s + 16] for s in (0, 20, 40)], axis=0),
        everything)
    perturb(agent.actor_network, 0.5, seed=1)
    # The batch has what the masking must get right: boundaries inside the
    # window, terminations (discount 0) and time-limit truncations (discount 1).
    last_steps = experience.next_step_type.numpy()[:, :-1] == ts.StepType.LAST
    discounts_at_last = experience.discount.numpy()[:, :-1][last_steps]
    assert (discounts_at_last == 0).any()
    assert (discounts_at_last == 1).any() or env_name == "multi_head"

    target_logits = tf.nest.map_structure(
        lambda d: d.logits_parameter(),
        agent.actor_network(experience.observation, experience.step_type, ())[0])
    values = agent.value_network(experience.observation, experience.step_type, ())[0]
    loss_info, rhos = assert_loss_matches_reference(
        agent, experience, target_logits, values, env.action_spec(), options,
        clips)
    np.testing.assert_allclose(float(loss_info.extra.mean_rho), rhos.mean(),
                               rtol=1e-5)


def gaussian_params_of(distribution):
    """A diagonal Gaussian's (mean, log-std) pairs [..., 2·D], float64."""
    mean = np.asarray(distribution.mean(), np.float64)
    log_std = np.log(np.asarray(distribution.stddev(), np.float64))
    return np.stack([mean, log_std], -1).reshape(mean.shape[:-1] + (-1,))


def test_continuous_loss_equals_the_float64_reference():
    """A 6-D continuous spec with ActorDistributionNetwork's
    NormalProjectionNetwork: log ρ is summed over the dimensions, entropy and
    KL are the Gaussian's, every clip active."""
    env = continuous_env(dim=6)
    options = dict(baseline_cost=0.3, entropy_cost=0.02, kl_cost=0.1,
                   reduction="masked_mean")
    clips = dict(clip_rho_threshold=1.2, clip_pg_rho_threshold=0.9,
                 clip_c_threshold=0.8, lambda_=0.9, alpha_=1.0)
    agent = make_agent(env, discount_factor=0.95, **options, **clips)
    experience = windows(collect(agent, env, 40), length=12)
    # The trajectories keep the actions as drawn, outside [−1, 1] too.
    assert (np.abs(experience.action.numpy()) > 1).any()
    perturb(agent.actor_network, 0.1, seed=1)
    distribution = agent.actor_network(experience.observation, experience.step_type,
                                       ())[0]
    values = agent.value_network(experience.observation, experience.step_type, ())[0]
    loss_info, rhos = assert_loss_matches_reference(
        agent, experience, gaussian_params_of(distribution), values,
        env.action_spec(), options, clips)
    np.testing.assert_allclose(float(loss_info.extra.ess_fraction),
                               rhos.sum() ** 2 / (rhos.size * (rhos ** 2).sum()),
                               rtol=1e-4)


def test_continuous_agent_records_the_gaussian_and_trains_on_pendulum():
    env = pendulum_env()
    agent = make_agent(env, entropy_cost=0.01)
    assert agent.collect_policy.info_spec["behaviour_logits"].shape == (2,)
    experience = windows(collect(agent, env, 30), length=11)
    time_steps = ts.TimeStep(experience.step_type, experience.reward,
                             experience.discount, experience.observation)
    recorded = experience.policy_info["behaviour_logits"].numpy()
    np.testing.assert_allclose(
        recorded, gaussian_params_of(agent.collect_policy.distribution(time_steps).action),
        rtol=1e-5, atol=1e-6)
    assert experience.action.shape == (8, 11, 1)
    before = snapshot(trainable(agent))
    loss_info = agent.train(experience)
    assert np.isfinite(loss_info.loss.numpy())
    after = snapshot(trainable(agent))
    assert all(not np.array_equal(b, a) for b, a in zip(before, after))
    greedy = agent.policy.action(ts.restart(tf.zeros([3, 3]), batch_size=3)).action
    assert greedy.shape == (3, 1) and (np.abs(greedy.numpy()) <= 2).all()


def test_a_squashed_gaussian_is_refused():
    from tf_agents.networks import normal_projection_network
    env = continuous_env(dim=2)
    actor = actor_distribution_network.ActorDistributionNetwork(
        env.observation_spec(), env.action_spec(), fc_layer_params=(8,),
        continuous_projection_net=lambda spec: normal_projection_network.
        NormalProjectionNetwork(spec, scale_distribution=True))
    agent = ImpalaAgent(env.time_step_spec(), env.action_spec(), actor,
                        value_network.ValueNetwork(env.observation_spec()),
                        tf_keras.optimizers.Adam())
    with pytest.raises(TypeError, match="scale_distribution=True squashes"):
        agent.collect_policy.action(env.reset())


def assert_loss_matches_reference(agent, experience, target_logits, values,
                                  action_spec, options, clips):
    """`agent.loss(experience)` and its terms against `reference_loss` of the
    learner's `target_logits` and `values` (γ = 0.95), every clip active;
    returns the loss info and the reference's ρ."""
    loss_info = agent.loss(experience)
    want, terms, rhos = reference_loss(
        experience, target_logits, values, action_spec, gamma=0.95,
        **options, **clips)
    assert (rhos > 1.2).any() and (rhos < 0.8).any()  # every clip is active
    np.testing.assert_allclose(float(loss_info.loss), want, rtol=2e-5)
    for name, value in terms.items():
        np.testing.assert_allclose(float(getattr(loss_info.extra, name)), value,
                                   rtol=2e-5, atol=1e-6)
    return loss_info, rhos


def test_a_boundary_splits_the_loss_into_its_two_episodes(cartpole):
    """Identity: with reduction="sum", a window with a boundary at row k has
    the loss of rows 0 … k (bootstrapping from row k's final observation) plus
    that of rows k + 1 … (a new episode); nothing leaks across the boundary."""
    env, _, replay_buffer = cartpole
    agent = make_agent(env, seed=3, entropy_cost=0.01, kl_cost=0.1, lambda_=0.9)
    perturb(agent.actor_network, 0.3, seed=2)
    everything = replay_buffer.gather_all()  # [N_ENVS, steps, ...]
    step_type = everything.step_type.numpy()[0]
    boundaries = np.flatnonzero(step_type == ts.StepType.LAST)
    k = int(boundaries[boundaries >= 4][0])  # a boundary with ≥ 4 rows before it
    start, end = k - 4, k + 8               # a window of 12 rows, boundary at 4
    assert (step_type[start:end] == ts.StepType.LAST).sum() == 1

    def rows(first, stop):
        return tf.nest.map_structure(lambda t: t[:1, first:stop], everything)

    whole = float(agent.loss(rows(start, end)).loss)
    pieces = (float(agent.loss(rows(start, k + 1)).loss)
              + float(agent.loss(rows(k + 1, end)).loss))
    np.testing.assert_allclose(whole, pieces, rtol=1e-5)
    # Not an identity by accident: without the mask the two differ.
    window = rows(start, end)
    unmasked = window._replace(step_type=tf.ones_like(window.step_type))
    assert abs(whole - float(agent.loss(unmasked).loss)) > 1e-3


# --- Checkpoints and SavedModel ------------------------------------------------


def check_checkpointer_round_trip(make, experience, directory):
    """An agent `make(seed=1)` trained twice, checkpointed, restored into
    `make(seed=2)`: same weights, step counter and optimizer slots."""
    trained = make(seed=1)
    trained.train(experience)
    trained.train(experience)
    common.Checkpointer(str(directory), agent=trained, policy=trained.policy,
                        global_step=trained.train_step_counter).save(
                            trained.train_step_counter)

    fresh = make(seed=2)
    assert not np.array_equal(trainable(fresh)[0].numpy(),
                              trainable(trained)[0].numpy())
    checkpointer = common.Checkpointer(
        str(directory), agent=fresh, policy=fresh.policy,
        global_step=fresh.train_step_counter)
    checkpointer.initialize_or_restore().assert_existing_objects_matched()
    assert int(fresh.train_step_counter) == 2
    for want, got in zip(trainable(trained), trainable(fresh)):
        np.testing.assert_array_equal(want.numpy(), got.numpy())
    # The optimizer's slots came back too: the next step is the same.
    trained.train(experience)
    fresh.train(experience)
    for want, got in zip(trainable(trained), trainable(fresh)):
        np.testing.assert_allclose(want.numpy(), got.numpy(), rtol=1e-6, atol=1e-7)
    return trained, fresh


def test_checkpointer_restores_the_same_weights(cartpole, tmp_path):
    env, _, replay_buffer = cartpole
    check_checkpointer_round_trip(lambda seed: make_agent(env, seed=seed),
                                  windows(replay_buffer, length=11), tmp_path)


RELOAD = textwrap.dedent("""
    import json, sys
    import gymnasium
    import numpy as np
    import tensorflow as tf
    import tensorflow_probability  # registers the distributions' TypeSpecs
    export, collect_export, data = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
    assert "tf_agents" not in sys.modules

    def time_step(observation):
        batch = len(observation)
        return {"0/step_type": tf.ones([batch], tf.int32),
                "0/reward": tf.zeros([batch]), "0/discount": tf.ones([batch]),
                "0/observation": tf.constant(observation, tf.float32)}

    policy = tf.saved_model.load(export)
    action = policy.signatures["action"]
    got = action(**time_step(data["observations"]))["action"].numpy()
    assert got.tolist() == data["actions"], (got, data["actions"])
    collect = tf.saved_model.load(collect_export).signatures["action"]
    info = collect(**time_step(data["observations"]))
    np.testing.assert_allclose(info["info/behaviour_logits"].numpy(),
                               data["logits"], rtol=1e-6, atol=1e-6)

    env = gymnasium.make("CartPole-v1")
    observation, _ = env.reset(seed=0)
    episode_return, done = 0.0, False
    while not done:
        a = int(action(**time_step(observation[None]))["action"][0])
        observation, reward, terminated, truncated, _ = env.step(a)
        episode_return += reward
        done = terminated or truncated
    print("RELOADED_OK", episode_return)
""")


def test_policy_saver_export_reloads_in_a_fresh_process_and_acts(cartpole, tmp_path):
    env, _, replay_buffer = cartpole
    agent = make_agent(env, seed=4)
    agent.train(windows(replay_buffer, length=11))
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(
        str(tmp_path / "policy"))
    policy_saver.PolicySaver(agent.collect_policy, batch_size=None).save(
        str(tmp_path / "collect_policy"))
    observations = np.random.default_rng(0).normal(0, 0.5, (16, 4)).astype(np.float32)
    time_steps = ts.restart(tf.constant(observations), batch_size=16)
    data = {"observations": observations.tolist(),
            "actions": agent.policy.action(time_steps).action.numpy().tolist(),
            "logits": agent.collect_policy.action(time_steps).info[
                "behaviour_logits"].numpy().tolist()}
    assert 0 < sum(data["actions"]) < 16  # both actions occur
    (tmp_path / "data.json").write_text(json.dumps(data))
    reload_in_a_fresh_process(RELOAD, tmp_path / "policy",
                              tmp_path / "collect_policy", tmp_path / "data.json")


def reload_in_a_fresh_process(script, *args):
    """Runs `script` in a fresh interpreter without TF_USE_LEGACY_KERAS (a
    reloaded policy needs neither TF-Agents nor Keras 2); it must print
    RELOADED_OK."""
    env_vars = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=env_vars)
    assert result.returncode == 0 and "RELOADED_OK" in result.stdout, (
        result.stdout + result.stderr[-4000:])


RELOAD_CONTINUOUS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_probability  # registers the distributions' TypeSpecs
    export, data = sys.argv[1], json.load(open(sys.argv[2]))
    assert "tf_agents" not in sys.modules
    observation = tf.constant(data["observations"], tf.float32)
    batch = len(data["observations"])
    action = tf.saved_model.load(export).signatures["action"](**{
        "0/step_type": tf.ones([batch], tf.int32), "0/reward": tf.zeros([batch]),
        "0/discount": tf.ones([batch]), "0/observation": observation})["action"]
    np.testing.assert_allclose(action.numpy(), data["means"], rtol=1e-5, atol=1e-6)
    print("RELOADED_OK")
""")


def test_continuous_greedy_policy_is_the_mean_after_a_fresh_process_reload(tmp_path):
    env = continuous_env(dim=6)
    agent = make_agent(env, seed=5)
    agent.train(windows(collect(agent, env, 30), length=9))
    policy_saver.PolicySaver(agent.policy, batch_size=None).save(
        str(tmp_path / "policy"))
    observations = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
    time_steps = ts.restart(tf.constant(observations), batch_size=5)
    means = agent.actor_network(time_steps.observation, time_steps.step_type,
                                ())[0].mean().numpy()
    np.testing.assert_allclose(agent.policy.action(time_steps).action, means,
                               rtol=1e-6)
    (tmp_path / "data.json").write_text(json.dumps(
        {"observations": observations.tolist(), "means": means.tolist()}))
    reload_in_a_fresh_process(RELOAD_CONTINUOUS, tmp_path / "policy",
                              tmp_path / "data.json")
