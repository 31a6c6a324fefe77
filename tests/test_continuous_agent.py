"""The agent on Box action spaces: Pendulum-v1 through every backend and the
LSTM core, greedy = the mean in the exported policy, the running statistics
(observation normalisation, reward scaling) against float64 references,
across a real resume and in a fresh-process SavedModel reload."""
import json
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tolerances import EPS32, SUBPROCESS_TIMEOUT_S

from tf_vtrace.agent import _running_statistics, envs, networks, policies
from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import learner as learner_lib
from tf_vtrace.agent import train as train_lib
from tf_vtrace.agent.config import Config
from tf_vtrace.agent.presets import PRESETS

PENDULUM = Config(env_id="Pendulum-v1", num_envs=4, unroll_length=8,
                  total_env_steps=4 * 8 * 4, optimizer="adam",
                  learning_rate=3e-4, entropy_cost=0., jit_compile=False,
                  normalize_observations=True, scale_rewards=True)
# Pendulum-v1's observation: cos θ, sin θ, θ̇ ∈ [−8, 8].
OBSERVATIONS = np.array([[1., 0., 0.], [0., 1., 8.], [-1., 0., -3.]], np.float32)


def mlp_float64(weights, observations, statistics=None, state_dependent=False):
    """The MLP's Gaussian mean and log-std in float64 from its named weights
    (`tf_vtrace.agent.networks.mlp`: tanh towers, then the head)."""
    x = np.asarray(observations, np.float64)
    if statistics is not None:
        mean, var = statistics
        x = np.clip((x - mean) / np.sqrt(var + 1e-8), -10., 10.)
    i = 0
    while f"policy_{i}/kernel" in weights:
        x = np.tanh(x @ weights[f"policy_{i}/kernel"] + weights[f"policy_{i}/bias"])
        i += 1
    mean = x @ weights["gaussian_head/mean/kernel"] + weights["gaussian_head/mean/bias"]
    log_std = (x @ weights["gaussian_head/log_std/kernel"]
               + weights["gaussian_head/log_std/bias"] if state_dependent
               else np.broadcast_to(weights["gaussian_head/log_std"], mean.shape))
    return mean, log_std


def checkpoint_counts(out_dir):
    """The statistics' counts in the run's newest checkpoint, by key."""
    reader = tf.train.load_checkpoint(
        tf.train.latest_checkpoint(str(pathlib.Path(out_dir) / "checkpoints")))
    return {key: float(reader.get_tensor(key))
            for key in reader.get_variable_to_shape_map()
            if "observation_count" in key or "return_count" in key}


def named_weights(model):
    return {v.path: np.asarray(v.numpy(), np.float64) for v in model.weights}


def randomized(model, seed=0):
    """`model` with random weights (the head's small init hides mistakes) and
    non-trivial observation statistics."""
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0., 0.5, v.shape).astype(np.float32))
    statistics = _running_statistics.find(model)
    statistics.observation_mean.assign([0.2, -0.1, 1.5])
    statistics.observation_var.assign([0.3, 0.8, 9.])
    return model, (np.array([0.2, -0.1, 1.5]), np.array([0.3, 0.8, 9.]))


def test_config_takes_box_envs_and_presets_are_valid():
    observation_space, action_space = envs.env_spaces("Pendulum-v1")
    policy = envs.action_policy(action_space)
    assert isinstance(policy, policies.DiagonalGaussian)
    np.testing.assert_array_equal(policy.to_env(np.array([[-3.], [0.5], [7.]])),
                                  [[-2.], [0.5], [2.]])
    with pytest.raises(ValueError, match="a Gaussian policy: use action_policy"):
        envs.head_sizes(action_space)
    for name in ("pendulum", "lunarlander-continuous", "halfcheetah", "hopper"):
        config = Config(**PRESETS[name])
        assert config.normalize_observations and config.scale_rewards


@pytest.mark.parametrize("state_dependent", [False, True])
def test_numpy_forward_and_export_match_float64(tmp_path, state_dependent):
    """The actor's NumPy MLP and the exported policy's greedy action (the
    mean) against a float64 forward pass with normalisation; the sampled
    action of the export spreads by exp(log-std)."""
    observation_space, action_space = envs.env_spaces("Pendulum-v1")
    policy = envs.action_policy(action_space)
    model, statistics = randomized(networks.build_network(
        observation_space, policy, (8, 8), state_dependent_std=state_dependent,
        running_statistics="normalize"))
    mean, log_std = mlp_float64(named_weights(model), OBSERVATIONS, statistics,
                                state_dependent)
    forward = networks.MLPForward(model)
    forward.set_weights(model.get_weights())
    params, _ = forward(OBSERVATIONS)
    # A few dozen rounding errors of float32 sums of 8 terms, |x| ≲ 10.
    np.testing.assert_allclose(params[:, 0::2], mean, rtol=0, atol=1e4 * EPS32)
    np.testing.assert_allclose(params[:, 1::2], log_std, rtol=0, atol=1e4 * EPS32)
    from tf_vtrace import export
    path = export.export_policy(model, tmp_path / "policy",
                                **policy.export_arguments)
    loaded = tf.saved_model.load(path)
    out = loaded.act(OBSERVATIONS)
    np.testing.assert_allclose(out["greedy_action"], mean, rtol=0, atol=1e4 * EPS32)
    assert loaded.action_distribution.numpy() == b"gaussian"
    draws = np.stack([loaded.act(OBSERVATIONS)["sampled_action"].numpy()
                      for _ in range(400)])
    z = (draws - mean) / np.exp(log_std)
    # 400 standard normal draws per entry: mean within 5 standard errors.
    assert np.abs(z.mean(0)).max() < 5 / np.sqrt(400)
    assert 0.7 < z.std() < 1.3


def test_learner_statistics_and_reward_scale_against_float64():
    """One local unroll: the learner merges its raw observations and the
    actor's discounted returns (R ← γ R + r, reset after an episode's end),
    and its value targets use rewards / √(Var R + 1e-8), clipped to ±10."""
    config = PENDULUM.replace(num_envs=3, unroll_length=70, discount=0.9,
                              max_episode_steps=50)
    actor = actor_lib.LocalActor(config)
    learner = learner_lib.Learner(config, envs.env_spaces(config.env_id)[0],
                                  actor.action_policy)
    unroll = actor.collect()
    assert unroll["actions"].dtype == np.float32 and unroll["actions"].shape == (70, 3, 1)
    assert np.abs(unroll["actions"]).max() > 0  # unclipped samples kept
    returns = np.zeros(3)
    want_returns = []
    for t in range(70):
        returns = 0.9 * returns + unroll["rewards"][t].astype(np.float64)
        want_returns.append(returns.copy())
        returns[unroll["terminated"][t] | unroll["truncated"][t]] = 0.
    np.testing.assert_allclose(unroll["discounted_returns"], want_returns, rtol=1e-6)
    assert unroll["truncated"].any()  # the returns were reset in this unroll
    learner.merge_statistics(unroll)
    statistics = learner.statistics
    observations = unroll["observations"][:-1].reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(statistics.observation_mean.numpy(),
                               observations.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(statistics.observation_var.numpy(),
                               observations.var(0), rtol=1e-5)
    np.testing.assert_allclose(statistics.return_var.numpy(),
                               np.var(want_returns), rtol=1e-5)
    assert statistics.observation_count.numpy() == 210
    rewards = unroll["rewards"].astype(np.float64)
    want = np.clip(rewards / np.sqrt(np.var(want_returns) + 1e-8), -10, 10)
    got = statistics.scale_rewards(unroll["rewards"]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("backend, changes", [
    ("local", {}), ("thread", dict(core="lstm")), ("process", {}),
    ("ray", dict(state_dependent_std=True, normalize_observations=False))])
def test_pendulum_trains_through_each_backend_and_exports(tmp_path, backend, changes):
    """A few updates; the statistics reached the exported policy (its count
    is every merged observation: T·B per update)."""
    if backend == "ray":
        pytest.importorskip("ray")
    config = PENDULUM.replace(backend=backend, **changes)
    summary = train_lib.train(config, str(tmp_path), progress=False)
    assert summary["env_steps"] == 128 and summary["skipped_updates"] == 0
    assert 0 <= summary["rho_clipped_fraction_last_100"] <= 1
    assert 0 < summary["ess_fraction_last_100"] <= 1
    loaded = tf.saved_model.load(str(tmp_path / "policy"))
    state = ([np.zeros([3, *loaded.core_state_shape.numpy()], np.float32)]
             if hasattr(loaded, "core_state_shape") else [])
    out = loaded.act(OBSERVATIONS, *state)
    assert out["greedy_action"].shape == (3, 1)
    counts = checkpoint_counts(tmp_path)
    observations = [n for key, n in counts.items() if "observation_count" in key]
    returns = [n for key, n in counts.items() if "return_count" in key]
    # Observations are merged only when normalised; returns always here.
    assert observations == [128. if config.normalize_observations else 0.]
    assert returns == [128.]


def test_statistics_survive_a_real_resume(tmp_path):
    """The newest checkpoint broken, the run resumes from update 8 and
    redoes 9 to 12: the statistics restored with it, the observation count
    ends at 12 updates' T·B (4 updates' if they had started afresh)."""
    config = PENDULUM.replace(backend="local", num_envs=2,
                              total_env_steps=16 * 12, checkpoint_every=4)
    train_lib.train(config, str(tmp_path), progress=False)
    data = tmp_path / "checkpoints" / "ckpt-12.data-00000-of-00001"
    with open(data, "r+b") as handle:
        handle.seek(data.stat().st_size // 2)
        handle.write(b"\xff" * 8)
    summary = train_lib.train(config, str(tmp_path), progress=False)
    assert summary["resumed_at_update"] == 8
    counts = checkpoint_counts(tmp_path)
    assert sorted(counts.values()) == [16. * 12] * 2, counts


def test_a_fresh_process_normalises_as_training_did(tmp_path):
    observation_space, action_space = envs.env_spaces("Pendulum-v1")
    policy = envs.action_policy(action_space)
    model, statistics = randomized(networks.build_network(
        observation_space, policy, (8,), running_statistics="normalize"), seed=3)
    from tf_vtrace import export
    path = export.export_policy(model, tmp_path / "policy", **policy.export_arguments)
    mean, _ = mlp_float64(named_weights(model), OBSERVATIONS, statistics)
    script = textwrap.dedent(f"""
        import json, numpy as np, tensorflow as tf
        policy = tf.saved_model.load({str(path)!r})
        out = policy.act(np.array({OBSERVATIONS.tolist()}, np.float32))
        print(json.dumps(out["greedy_action"].numpy().tolist()))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True,
                            text=True, timeout=SUBPROCESS_TIMEOUT_S,
                            cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    got = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(got, mean, rtol=0, atol=1e4 * EPS32)
    # Without the statistics the answer would differ: the test can fail.
    plain, _ = mlp_float64(named_weights(model), OBSERVATIONS)
    assert np.abs(plain - mean).max() > 1e-2


def test_evaluate_plays_the_mean_clipped_to_the_bounds(tmp_path):
    from tf_vtrace.agent.evaluate import evaluate
    config = PENDULUM.replace(backend="local", total_env_steps=32)
    train_lib.train(config, str(tmp_path), progress=False)
    returns = evaluate(str(tmp_path / "policy"), episodes=2)
    assert returns.shape == (2,) and (returns < 0).all()
    assert pathlib.Path(tmp_path / "policy").is_dir()


def test_the_learner_moves_the_gaussian_toward_the_rewarded_action():
    """One-step episodes rewarded −(a − 1)²: the learner's own samples, V-trace
    updates through the full step; the mean goes to 1 and σ shrinks."""
    config = PENDULUM.replace(num_envs=16, unroll_length=4, learning_rate=1e-2,
                              total_env_steps=64 * 150, normalize_observations=False,
                              scale_rewards=False)
    policy = policies.DiagonalGaussian([-2.], [2.])
    learner = learner_lib.Learner(config, envs.env_spaces("Pendulum-v1")[0], policy)
    rng = np.random.default_rng(0)
    observations = np.zeros((5, 16, 3), np.float32)
    for _ in range(150):
        params = learner.model(observations[:4].reshape(-1, 3))[0].numpy()
        actions = policy.sample_numpy(params, rng).reshape(4, 16, 1)
        learner.update(dict(
            observations=observations, actions=actions,
            behaviour_logits=params.reshape(4, 16, 2),
            rewards=-np.square(actions[..., 0] - 1.).astype(np.float32),
            discounts=np.zeros((4, 16), np.float32),
            truncated=np.zeros((4, 16), bool), final_observations=observations[1:],
            policy_version=np.int64(learner.version)))
    mean, log_std = learner.model(observations[0])[0].numpy()[0]
    assert abs(mean - 1.) < 0.3 and log_std < -0.3, (mean, log_std)
