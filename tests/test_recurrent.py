"""The recurrent core (`Config.core = "lstm"`): the learner replays the
actor's unroll from its initial core state with the actor's resets.

The key identity: with lag 0 the learner's π of every step of an unroll is
the actor's μ, so log ρ = log π − log μ = 0 to float rounding, across the
episode boundaries inside the unroll (episodes of 5 steps in unrolls of 16).
The weights are drawn at random, large, so that the policy depends strongly
on the core state: the controls (replay from a zero state, replay without
the resets) then move log ρ far above the tolerance.

Tolerance: actor and learner run the same float32 ops on the same [B]
batches, but compiled separately (XLA fusion may order sums differently);
log-probs are sums over the torso and the LSTM gates (≈ 64 terms), so
`rtol_for(float32, 64)` of the logits' scale.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from tolerances import SUBPROCESS_TIMEOUT_S, rtol_for

from tf_vtrace.agent import _recurrent, envs
from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import learner as learner_lib
from tf_vtrace.agent.config import Config
from tf_vtrace.agent.evaluate import evaluate
from tf_vtrace.export import export_policy

# gymnasium's SyncVectorEnv: the episodes the controls' margins were set on.
CONFIG = Config(core="lstm", core_size=16, hidden_sizes=(32,), num_envs=4,
                unroll_length=16, max_episode_steps=5, vector_env="gymnasium")


def _log_probs(logits, actions):
    log_pi = logits - np.log(np.sum(np.exp(logits), -1, keepdims=True))
    return np.take_along_axis(log_pi, actions, -1)[..., 0]


def _random_weights(model, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(0., 1. / np.sqrt(max(1, w.shape[0])), w.shape)
            .astype(np.float32) * 3. for w in model.get_weights()]


@pytest.fixture(scope="module")
def replay():
    space, action_space = envs.env_spaces(CONFIG.env_id)
    learner = learner_lib.Learner(CONFIG, space, envs.head_sizes(action_space))
    learner.model.set_weights(_random_weights(learner.model))
    actor = actor_lib.LocalActor(CONFIG)
    actor.set_weights(learner.get_weights(), 0)
    unrolls = [actor.collect() for _ in range(3)]
    actor.close()
    return learner, unrolls


def _learner_log_probs(learner, unroll, done=None, state=None):
    """log π of the unroll's actions, the learner's replay (optionally with
    other resets or another initial state)."""
    done = (unroll["terminated"] | unroll["truncated"]) if done is None else done
    state = unroll[_recurrent.CORE_STATE_KEY] if state is None else state
    logits, _, _ = _recurrent.unroll(learner.model, unroll["observations"],
                                     done, state, training=False)
    return _log_probs(logits.numpy()[:-1], unroll["actions"])


def test_unroll_carries_the_initial_core_state(replay):
    _, unrolls = replay
    for unroll in unrolls:
        assert set(unroll) == set(actor_lib.UNROLL_KEYS) | {
            _recurrent.CORE_STATE_KEY}
        assert unroll[_recurrent.CORE_STATE_KEY].shape == (4, 2, 16)
    # The first unroll starts from zeros, later ones from the carried state.
    assert not np.any(unrolls[0][_recurrent.CORE_STATE_KEY])
    assert np.all(np.abs(unrolls[1][_recurrent.CORE_STATE_KEY]).max((1, 2)) > 0.1)


def test_learner_log_probs_equal_behaviour_log_probs(replay):
    learner, unrolls = replay
    tolerance = 10 * rtol_for(np.float32, 64)
    for unroll in unrolls:
        done = unroll["terminated"] | unroll["truncated"]
        # Episode boundaries inside the unroll, every env.
        assert done[:-1].any(0).all(), done
        behaviour = _log_probs(unroll["behaviour_logits"], unroll["actions"])
        # The policy is far from uniform: log μ is informative.
        assert np.abs(behaviour - np.log(.5)).max() > 0.3
        targets = learner.vtrace_targets(unroll)
        np.testing.assert_allclose(np.log(targets["rhos"]), 0., atol=tolerance)
        np.testing.assert_allclose(_learner_log_probs(learner, unroll),
                                   behaviour, atol=tolerance)
        # The truncated episodes bootstrap from V of their own final
        # observation, after their own state: the actor's value.
        truncated = unroll["truncated"]
        assert truncated.any()
        np.testing.assert_allclose(
            targets["truncation_values"][truncated],
            unroll["truncation_values"][truncated],
            atol=tolerance * max(1., np.abs(unroll["truncation_values"]).max()))
    # Controls: a wrong initial state or missing resets are far off.
    later = unrolls[1]
    behaviour = _log_probs(later["behaviour_logits"], later["actions"])
    zero_state = np.zeros_like(later[_recurrent.CORE_STATE_KEY])
    assert np.abs(_learner_log_probs(learner, later, state=zero_state)
                  - behaviour).max() > 1000 * tolerance
    no_resets = np.zeros_like(later["terminated"])
    assert np.abs(_learner_log_probs(learner, later, done=no_resets)
                  - behaviour).max() > 1000 * tolerance


def test_learner_step_updates_a_recurrent_network(replay):
    learner, unrolls = replay
    before = learner.get_weights()
    diagnostics = learner.step(unrolls[0])
    assert diagnostics["update_skipped"] == 0.
    assert np.isfinite(diagnostics["loss"])
    assert max(np.abs(a - b).max() for a, b in
               zip(before, learner.get_weights())) > 0.
    learner.model.set_weights(before)


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_remote_backend_carries_the_core_state(backend):
    """A process or Ray actor (real Ray on loopback) gives a LocalActor's
    unrolls: the same initial core states, behaviour logits and actions."""
    from tf_vtrace.agent import backends
    config = CONFIG.replace(num_envs=3, unroll_length=6, jit_compile=False)
    local = actor_lib.LocalActor(config)
    weights = _random_weights(local.model)
    local.set_weights(weights, 0)
    expected = [local.collect() for _ in range(2)]
    local.close()
    remote = backends.make_actors(config.replace(backend=backend))
    try:
        remote.set_weights(weights, 0)
        got = [remote.collect() for _ in range(2)]
    finally:
        remote.close()
    for want, have in zip(expected, got):
        for key in (_recurrent.CORE_STATE_KEY, "behaviour_logits", "actions"):
            np.testing.assert_allclose(have[key], want[key], atol=1e-5,
                                       err_msg=key)


def test_mirrored_recurrent_learner_equals_one_device(tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "recurrent_worker.py")
    result = subprocess.run([sys.executable, worker, str(tmp_path)],
                            capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0 and "DONE" in result.stdout, (
        result.stdout + result.stderr[-5000:])
    out = json.loads((tmp_path / "recurrent_mirrored.json").read_text())
    assert out["replicas"] == 2
    for want, got in zip(out["want"], out["got"], strict=True):
        for key, value in want.items():
            assert abs(got[key] - value) <= 1e-5 * max(1., abs(value)), (
                key, value, got[key])
    assert out["weight_error"] < 1e-5


def test_exported_recurrent_policy_takes_and_returns_the_state(replay, tmp_path):
    learner, unrolls = replay
    path = export_policy(learner.model, tmp_path / "policy", (2,),
                         metadata={"env_id": CONFIG.env_id,
                                   "max_episode_steps": 30})
    policy = tf.saved_model.load(path)
    assert list(policy.core_state_shape.numpy()) == [2, 16]
    unroll = unrolls[1]
    state = unroll[_recurrent.CORE_STATE_KEY]
    out = policy.act(unroll["observations"][0], state)
    np.testing.assert_allclose(out["logits"].numpy(),
                               unroll["behaviour_logits"][0], atol=1e-4)
    # The returned state is the one the next step starts from.
    out2 = policy.act(unroll["observations"][1], out["core_state"])
    np.testing.assert_allclose(out2["logits"].numpy()[~unroll["terminated"][0]
                                                      & ~unroll["truncated"][0]],
                               unroll["behaviour_logits"][1][
                                   ~unroll["terminated"][0] & ~unroll["truncated"][0]],
                               atol=1e-4)
    returns = evaluate(path, episodes=3)
    assert returns.shape == (3,) and np.all((returns >= 1) & (returns <= 30))


def test_stateless_cartpole_observes_position_and_angle():
    env = envs.make_env(envs.STATELESS_CARTPOLE_ID)
    full = envs.make_env("CartPole-v1")
    observation, _ = env.reset(seed=3)
    full_observation, _ = full.reset(seed=3)
    assert env.observation_space.shape == (2,)
    np.testing.assert_array_equal(observation, full_observation[[0, 2]])
    for _ in range(5):
        observation, *_ = env.step(1)
        full_observation, *_ = full.step(1)
    np.testing.assert_array_equal(observation, full_observation[[0, 2]])
    assert env.spec.max_episode_steps == 500


def test_bad_core_is_named():
    with pytest.raises(ValueError, match="Config.core"):
        Config(core="gru")
    with pytest.raises(ValueError, match="Config.core_size"):
        Config(core="lstm", core_size=0)


def test_separate_value_core_keeps_the_pathways_apart():
    """`Config.separate_value_core`: the value's torso and LSTM are not the
    policy's. ∂V/∂θ_policy = 0 and ∂logits/∂θ_value = 0 exactly, each head's
    own pathway has a gradient; the one-step model replayed by `unroll`
    (with a reset) gives the same logits and values; the policy's half of
    the state alone decides the logits."""
    from tf_vtrace.agent import networks
    S = 8
    model = networks.lstm((2,), [2], (16,), S, seed=3,
                          separate_value_core=True)
    model.set_weights(_random_weights(model))
    assert _recurrent.core_state_shape(model) == (2, 2 * S)
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(5, 3, 2)).astype(np.float32)
    state = tf.constant(rng.normal(size=(3, 2, 2 * S)).astype(np.float32))
    weights = model.trainable_weights
    with tf.GradientTape(persistent=True) as tape:
        logits, values, _ = model([tf.constant(observations[0]), state])
        log_pi = tf.reduce_sum(tf.nn.log_softmax(logits)[:, 0])
        value = tf.reduce_sum(values)
    for output, own, other in ((log_pi, "policy", "value"),
                               (value, "value", "policy")):
        gradients = dict(zip((w.path for w in weights),
                             tape.gradient(output, weights)))
        # The core's kernels: _0 is the policy's, _1 the value's.
        own_core, other_core = (("_0", "_1") if own == "policy"
                                else ("_1", "_0"))
        head = "logits" if own == "policy" else "value"
        for path, g in gradients.items():
            theirs = (path.startswith(other) or path.endswith(other_core)
                      or path.startswith("value/" if own == "policy"
                                         else "logits/"))
            norm = 0. if g is None else float(tf.norm(g))
            if theirs:
                assert norm == 0., (own, path, norm)
            elif path.startswith((own, head)) or path.endswith(own_core):
                assert norm > 0., (own, path)
    # The replay gives the one-step model's outputs, across a reset.
    done = np.zeros((4, 3), bool)
    done[1, 0] = True
    replayed_logits, replayed_values, _ = _recurrent.unroll(
        model, observations, done, state, training=False)
    step_state = state
    for t in range(5):
        if t:
            step_state = _recurrent.reset(step_state, done[t - 1])
        logits, values, step_state = model([tf.constant(observations[t]),
                                            step_state])
        tolerance = rtol_for(np.float32, 64) * 10
        np.testing.assert_allclose(replayed_logits[t], logits, atol=tolerance)
        np.testing.assert_allclose(replayed_values[t], values, atol=tolerance)
    # The value's half of the state does not move the logits; the policy's does.
    policy_half = np.concatenate([np.ones(S), np.zeros(S)]).astype(np.float32)
    base, _, _ = model([tf.constant(observations[0]), state * policy_half])
    logits, _, _ = model([tf.constant(observations[0]), state])
    np.testing.assert_array_equal(base, logits)
    other, _, _ = model([tf.constant(observations[0]),
                         state * (1. - policy_half)])
    assert np.abs(other - logits).max() > 0.1


def test_stateless_cartpole_preset_builds_two_pathways():
    from tf_vtrace.agent import networks
    from tf_vtrace.agent.presets import PRESETS
    config = Config(**PRESETS["stateless-cartpole"])
    assert config.env_id == envs.STATELESS_CARTPOLE_ID
    space, action_space = envs.env_spaces(config.env_id)
    model = networks.build_network(
        space, envs.head_sizes(action_space), config.hidden_sizes,
        core=config.core, core_size=config.core_size,
        separate_value_core=config.separate_value_core)
    assert _recurrent.core_state_shape(model) == (2, 2 * config.core_size)
    with pytest.raises(ValueError, match="Config.separate_value_core"):
        Config(core="lstm", separate_value_core="yes")
    with pytest.raises(ValueError, match="Config.separate_value_core"):
        Config(separate_value_core=True)  # the feed-forward networks
