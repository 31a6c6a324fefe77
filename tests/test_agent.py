"""The IMPALA agent (tf_vtrace.agent): config errors, the unroll contract,
truncation on a real CartPole-v1 time limit, the policy lag, the export."""
import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from tolerances import SUBPROCESS_TIMEOUT_S, assert_close_to_rounding
from vtrace_reference import categorical_log_probs, vtrace_reference

from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import envs, networks, policy_lag
from tf_vtrace.agent import learner as learner_lib
from tf_vtrace.agent import train as train_lib
from tf_vtrace.agent.config import Config

GAMMA = 0.99


# --- Configuration -----------------------------------------------------------

@pytest.mark.parametrize("changes, field, expected", [
    (dict(env_id="NoSuchEnv-v0"), "env_id", "not a registered"),
    (dict(env_id="Blackjack-v1"), "env_id", "Box"),
    (dict(normalize_observations=1), "normalize_observations", "True or False"),
    (dict(scale_rewards=True, strategy="multi_worker"), "normalize_observations",
     "multi_worker"),
    (dict(unroll_length=0), "unroll_length", ">= 1"),
    (dict(policy_lag=-1), "policy_lag", ">= 0"),
    (dict(num_envs=0), "num_envs", ">= 1"),
    (dict(learning_rate=0.), "learning_rate", "positive"),
    (dict(discount=1.5), "discount", "[0, 1]"),
    (dict(unroll_length=2.5), "unroll_length", "integer"),
    (dict(actor_inference="numpy"), "actor_inference", "'tensorflow'"),
    (dict(backend="threads"), "backend", "'thread'"),
    (dict(optimizer="sgd"), "optimizer", "'rmsprop'"),
    (dict(hidden_sizes=64), "hidden_sizes", "non-empty tuple"),
    (dict(hidden_sizes=(64, 0)), "hidden_sizes", "positive integers"),
    (dict(learning_rate=True), "learning_rate", "positive number"),
    (dict(reward_clip="1"), "reward_clip", "positive number or None"),
    (dict(max_episode_steps=0), "max_episode_steps", ">= 1"),
    (dict(entropy_cost=-0.1), "entropy_cost", ">= 0"),
    (dict(backend="local", num_actors=2), "num_actors", "'local'"),
    (dict(checkpoint_every=0), "checkpoint_every", ">= 1"),
    (dict(checkpoint_every_s=0), "checkpoint_every_s", "positive number"),
    (dict(updates_per_call=0), "updates_per_call", ">= 1"),
    (dict(updates_per_call=5), "updates_per_call", "at most 4"),
])
def test_bad_config_names_the_field(changes, field, expected):
    with pytest.raises(ValueError, match=rf"Config\.{field}.*") as error:
        Config(**changes)
    assert expected in str(error.value)


def test_cli_rejects_bad_config_before_any_work(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "train", "--out", str(out),
         "--env", "Blackjack-v1"], capture_output=True, text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 2, result.stderr
    assert "Config.env_id" in result.stderr and "Tuple" in result.stderr
    assert not out.exists()  # nothing was started


CLUSTER = {"worker": ["localhost:12345", "localhost:12346"], "chief": ["localhost:1"]}


@pytest.mark.parametrize("tf_config", [
    None, "{}", json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 1}}),
    json.dumps({"cluster": CLUSTER, "task": {"type": "chief", "index": 0}})])
def test_a_tf_config_of_one_of_its_workers_passes(tf_config):
    environ = {} if tf_config is None else {"TF_CONFIG": tf_config}
    learner_lib.check_tf_config(environ)


@pytest.mark.parametrize("tf_config, match", [
    ("", r"TF_CONFIG is not JSON \(Expecting value"),
    ("{not json", r"TF_CONFIG is not JSON"),
    ("[1]", r'TF_CONFIG must be \{"cluster"'),
    (json.dumps({"cluster": CLUSTER}), r'TF_CONFIG must be \{"cluster"'),
    (json.dumps({"task": {"type": "worker", "index": 0}}), r'TF_CONFIG must be'),
    (json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 2}}),
     r"task \{'type': 'worker', 'index': 2\} is not one of its cluster's workers"),
    (json.dumps({"cluster": CLUSTER, "task": {"type": "ps", "index": 0}}),
     r"a job of the cluster \(\['chief', 'worker'\]\)"),
    (json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": "1"}}),
     r"is not one of its cluster's workers"),
])
def test_a_tf_config_that_names_no_worker_of_its_cluster_is_named(tf_config, match):
    with pytest.raises(ValueError, match=match):
        learner_lib.check_tf_config({"TF_CONFIG": tf_config})


def test_cli_rejects_a_bad_tf_config_before_any_work(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "train", "--out", str(out),
         "--strategy", "multi_worker"], capture_output=True, text=True,
        timeout=SUBPROCESS_TIMEOUT_S, env=dict(os.environ, TF_CONFIG="{not json"))
    assert result.returncode == 2, result.stderr
    assert "error: TF_CONFIG is not JSON" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


# --- The unroll contract and truncation --------------------------------------

T, B, LIMIT = 12, 3, 5


@pytest.fixture(scope="module")
def truncating_run():
    """A real CartPole-v1 with a 5-step time limit: every episode is truncated
    (CartPole cannot fall within 5 steps), at t = 4 and t = 9 of the unroll.
    The actor keeps its own random weights, so μ ≠ π and ρ is not 1.
    gymnasium's `SyncVectorEnv` (env b seeded seed + b), so that one
    gymnasium env per column replays it (the NumPy-vectorized CartPole is
    checked transition by transition in test_vector_envs.py)."""
    config = Config(num_envs=B, unroll_length=T, max_episode_steps=LIMIT,
                    seed=3, jit_compile=False, vector_env="gymnasium")
    actor = actor_lib.LocalActor(config)
    unroll = actor.collect()
    learner = learner_lib.Learner(config, envs.env_spaces(config.env_id)[0],
                                  actor.head_sizes)
    yield config, actor, unroll, learner
    actor.close()


def test_unroll_contract_shapes_and_dtypes(truncating_run):
    _, _, unroll, _ = truncating_run
    assert set(unroll) == set(actor_lib.UNROLL_KEYS)
    expected = {
        "observations": ((T + 1, B, 4), np.float32),
        "actions": ((T, B, 1), np.int32),
        "behaviour_logits": ((T, B, 2), np.float32),
        "rewards": ((T, B), np.float32), "discounts": ((T, B), np.float32),
        "terminated": ((T, B), np.bool_), "truncated": ((T, B), np.bool_),
        "final_observations": ((T, B, 4), np.float32),
        "truncation_values": ((T, B), np.float32),
        "policy_version": ((), np.int64),
    }
    for key, (shape, dtype) in expected.items():
        assert unroll[key].shape == shape, key
        assert unroll[key].dtype == dtype, key
    assert unroll["episode_returns"].tolist() == [float(LIMIT)] * (2 * B)


def test_truncation_is_kept_apart_from_termination(truncating_run):
    _, _, unroll, _ = truncating_run
    truncated_steps = np.zeros((T, B), bool)
    truncated_steps[[LIMIT - 1, 2 * LIMIT - 1]] = True
    np.testing.assert_array_equal(unroll["truncated"], truncated_steps)
    assert not unroll["terminated"].any()
    # Truncation is not termination: the discount stays γ.
    np.testing.assert_array_equal(unroll["discounts"], np.full((T, B), GAMMA, np.float32))


def test_final_observation_matches_a_separate_env(truncating_run):
    """An independent replay: one gymnasium env per column, same seed and
    actions. x_{t+1} after the truncation is the next episode's reset; the
    truncated episode's own last state is in final_observations."""
    config, _, unroll, _ = truncating_run
    for b in range(B):
        env = gym.make("CartPole-v1", max_episode_steps=LIMIT)
        obs, _ = env.reset(seed=config.seed + b)
        np.testing.assert_array_equal(unroll["observations"][0, b], obs)
        for t in range(T):
            obs, _, terminated, truncated, _ = env.step(int(unroll["actions"][t, b, 0]))
            np.testing.assert_array_equal(unroll["final_observations"][t, b], obs)
            if truncated:
                obs, _ = env.reset()
                assert not np.allclose(unroll["observations"][t + 1, b], unroll[
                    "final_observations"][t, b])
            np.testing.assert_array_equal(unroll["observations"][t + 1, b], obs)
        env.close()


def test_actor_truncation_values_are_its_value_of_the_final_observation(truncating_run):
    _, actor, unroll, _ = truncating_run
    truncated = unroll["truncated"]
    _, values = actor.model(unroll["final_observations"][truncated])
    np.testing.assert_allclose(unroll["truncation_values"][truncated], values,
                               rtol=1e-5, atol=1e-6)
    assert not unroll["truncation_values"][~truncated].any()


def _reference_targets(model, unroll, truncation_as_terminal=False):
    """vs and A_t from the float64 reference, with V from calling the Keras
    model directly: a truncated step gets r + γ V(final obs) and no trace."""
    logits, values = (np.asarray(x, np.float64) for x in model(
        unroll["observations"].reshape(-1, 4)))
    logits, values = logits.reshape(T + 1, B, 2), values.reshape(T + 1, B)
    _, final_values = model(unroll["final_observations"].reshape(-1, 4))
    final_values = np.asarray(final_values, np.float64).reshape(T, B)
    actions = unroll["actions"][..., 0]
    log_rhos = (categorical_log_probs(logits[:T], actions)
                - categorical_log_probs(unroll["behaviour_logits"], actions))
    truncated = unroll["truncated"]
    rewards = unroll["rewards"].astype(np.float64)
    if not truncation_as_terminal:
        rewards = np.where(truncated, rewards + GAMMA * final_values, rewards)
    discounts = np.where(truncated, 0., unroll["discounts"])
    vs, advantages = vtrace_reference(log_rhos, discounts, rewards, values[:T],
                                      values[T])
    return vs, advantages, log_rhos


def test_learner_targets_bootstrap_truncation_from_final_value(truncating_run):
    _, _, unroll, learner = truncating_run
    targets = learner.vtrace_targets(unroll)
    vs, advantages, log_rhos = _reference_targets(learner.model, unroll)
    # Clipping is active on both sides of 1 in this data.
    assert (log_rhos > 0).any() and (log_rhos < 0).any()
    np.testing.assert_allclose(targets["vs"], vs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(targets["pg_advantages"], advantages, rtol=1e-4,
                               atol=1e-4)
    # Treating the time limit as a terminal would give other targets.
    terminal_vs, _, _ = _reference_targets(learner.model, unroll, True)
    assert np.abs(terminal_vs - vs).max() > 1e-2


def test_no_correction_forces_rho_to_one(truncating_run):
    config, _, unroll, _ = truncating_run
    ablation = config.replace(correction=False)
    learner = learner_lib.Learner(ablation, envs.env_spaces(config.env_id)[0], (2,))
    targets = learner.vtrace_targets(unroll)
    logits, values = learner.model(unroll["observations"].reshape(-1, 4))
    values = np.asarray(values, np.float64).reshape(T + 1, B)
    _, final_values = learner.model(unroll["final_observations"].reshape(-1, 4))
    truncated = unroll["truncated"]
    rewards = np.where(truncated, unroll["rewards"] + GAMMA * np.asarray(
        final_values).reshape(T, B), unroll["rewards"])
    discounts = np.where(truncated, 0., unroll["discounts"])
    vs, _ = vtrace_reference(np.zeros((T, B)), discounts, rewards, values[:T],
                             values[T])  # ρ = c = 1: plain n-step returns
    np.testing.assert_allclose(targets["vs"], vs, rtol=1e-4, atol=1e-4)


# --- The optimizer -----------------------------------------------------------

def _two_updates(optimizer, gradients, start):
    import tensorflow as tf
    variable = tf.Variable(start, dtype=tf.float32)
    optimizer.build([variable])
    for _ in range(2):
        optimizer.apply_gradients([(tf.constant(gradients, tf.float32), variable)])
    return variable.numpy()


START = np.array([1., -2., .5, 3.])


def _rmsprop_reference(gradients, learning_rate, start, num_updates=4):
    # v ← ρ v + (1 − ρ) g², θ ← θ − lr_k g / √(v + ε), ρ = 0.99, ε = 0.01, the
    # step size lr_k decayed linearly from lr to 0 over num_updates.
    theta, v = start.astype(np.float64), np.zeros(4)
    for k in range(2):
        v = .99 * v + .01 * gradients ** 2
        theta -= learning_rate * (1 - k / num_updates) * gradients / np.sqrt(v + .01)
    return theta


def _config(optimizer, learning_rate):
    # 40 env steps of 2 envs × 5 steps: 4 updates (the schedule's length).
    return Config(optimizer=optimizer, learning_rate=learning_rate, num_envs=2,
                  unroll_length=5, total_env_steps=40)


def test_rmsprop_is_the_papers_epsilon_inside_the_root():
    g = np.array([.3, -1e-3, 2., 0.])
    got = _two_updates(learner_lib.make_optimizer(_config("rmsprop", .1)), g,
                       START)
    np.testing.assert_allclose(got, _rmsprop_reference(g, .1, START), rtol=1e-6)


def test_rmsprop_steps_shrink_with_the_gradient_where_adams_do_not():
    small, large = np.full(4, 1e-3), np.full(4, .1)
    ratios = {}
    for name in ("adam", "rmsprop"):
        # From θ = 0: the moves themselves, to float32's relative rounding.
        moves = [np.abs(_two_updates(learner_lib.make_optimizer(
            _config(name, 1e-3)), g, np.zeros(4))) for g in (small, large)]
        ratios[name] = moves[0] / moves[1]
    # RMSProp: a 100x smaller gradient moves θ about 100x less (ε = 0.01
    # dominates v); Adam (ε = 1e-5): within a factor 2.
    expected = (_rmsprop_reference(small, 1e-3, np.zeros(4))
                / _rmsprop_reference(large, 1e-3, np.zeros(4)))
    np.testing.assert_allclose(ratios["rmsprop"], expected, rtol=1e-4)
    assert np.all(expected < .011)
    assert np.all(ratios["adam"] > .5), ratios["adam"]


# --- Policy lag --------------------------------------------------------------

def test_weight_history_returns_the_weights_lag_updates_old():
    history = policy_lag.WeightHistory(lag=3)
    for version in range(10):
        history.push(version, [np.full(2, version)])
        expected = max(0, version - 3)
        assert history.lagged()[0] == expected
        assert history.lagged()[1][0][0] == expected


@pytest.mark.parametrize("lag", [0, 2])
def test_actor_acts_with_learner_weights_from_lag_updates_ago(lag):
    config = Config(num_envs=2, unroll_length=4, policy_lag=lag, seed=1,
                    jit_compile=False, learning_rate=0.05)
    actor = actor_lib.LocalActor(config)
    learner = learner_lib.Learner(config, envs.env_spaces(config.env_id)[0],
                                  actor.head_sizes)
    history = policy_lag.WeightHistory(lag)
    history.push(0, learner.get_weights())
    snapshots = [learner.get_weights()]  # learner weights after k updates
    for k in range(5):
        unroll, diagnostics = train_lib.actor_learner_step(actor, learner, history)
        expected = max(0, k - lag)
        assert int(unroll["policy_version"]) == expected
        assert diagnostics["policy_lag"] == k - expected
        for acting, old in zip(actor.model.get_weights(), snapshots[expected]):
            np.testing.assert_array_equal(acting, old)
        snapshots.append(learner.get_weights())
    # The learner did move: the snapshots differ.
    assert not np.array_equal(snapshots[0][0], snapshots[-1][0])
    actor.close()


def test_a_prepared_unroll_updates_as_the_unroll_and_versions_stay_exact():
    # `Learner.prepare` (the actor threads' conversion of the step's inputs)
    # changes nothing in the update; the versions travel bit-cast in the
    # step's one float32 output, exact past 2**24 (float32's last integer).
    config = Config(num_envs=2, unroll_length=4, seed=5, jit_compile=False)
    actor = actor_lib.LocalActor(config)
    space = envs.env_spaces(config.env_id)[0]
    plain, prepared = (learner_lib.Learner(config, space, actor.head_sizes)
                       for _ in range(2))
    prepared.model.set_weights(plain.model.get_weights())
    for start in (0, 2**40 + 3):
        for learner in (plain, prepared):
            learner.optimizer.iterations.assign(start)
        actor.set_weights(plain.get_weights(), max(0, start - 2))
        unroll = actor.collect()
        made = prepared.prepare(unroll)
        assert made.keys() == unroll.keys()
        assert all(made[key] is unroll[key] for key in unroll)
        for tensor, key in zip(made.tensors, learner_lib.LEARNER_INPUTS):
            np.testing.assert_array_equal(tensor.numpy(), unroll[key])
        before = plain.get_weights()
        one, other = plain.update(unroll), prepared.update(made)
        assert one.version == other.version == start + 1
        assert one.diagnostics["policy_lag"] == min(start, 2)
        assert one.diagnostics == other.diagnostics
        for a, b, now in zip(one.weights, other.weights,
                             plain.model.get_weights()):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, now)
        if start == 0:  # The update moved the weights (its lr is not 0).
            assert not np.array_equal(before[0], one.weights[0])
    actor.close()


@pytest.mark.parametrize("core", ["none", "lstm"])
def test_updates_in_one_call_are_the_updates_of_one_call_each(core):
    # `update_each` makes its updates in turn, each on the weights the one
    # before left: bit for bit the updates of separate calls (weights,
    # versions, diagnostics, the policy lag of each unroll), and a call of
    # one in a step compiled for two is the update of a step for one.
    config = Config(num_envs=2, unroll_length=4, seed=6, core=core,
                    optimizer="adam", learning_rate=0.05)
    actor = actor_lib.LocalActor(config)
    space = envs.env_spaces(config.env_id)[0]
    one_each = learner_lib.Learner(config.replace(updates_per_call=1), space,
                                   actor.head_sizes)
    together = learner_lib.Learner(config, space, actor.head_sizes)
    together.model.set_weights(one_each.model.get_weights())
    actor.set_weights(one_each.get_weights(), 0)
    unrolls = [actor.collect() for _ in range(5)]
    singles = [one_each.update(unroll) for unroll in unrolls]
    pairs = (together.update_each(unrolls[0:2])
             + together.update_each(unrolls[2:4]) + [together.update(unrolls[4])])
    assert [u.version for u in pairs] == [u.version for u in singles] == [1, 2, 3, 4, 5]
    assert [u.diagnostics["policy_lag"] for u in pairs] == [0, 1, 2, 3, 4]
    for single, paired in zip(singles, pairs):
        assert single.diagnostics == paired.diagnostics
    # The weights are read back after a call's last update only.
    assert [u.weights is None for u in pairs] == [True, False, True, False, False]
    for index in (1, 3, 4):
        for a, b in zip(singles[index].weights, pairs[index].weights):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(singles[0].weights[0], singles[4].weights[0])
    with pytest.raises(ValueError, match=r"1 to 2 unrolls.*got 3"):
        together.update_each(unrolls[:3])
    with pytest.raises(ValueError, match=r"1 to 1 unrolls.*got 2"):
        one_each.update_each(unrolls[:2])
    actor.close()


def test_learner_weights_are_keras_weights_and_actor_takes_them_exactly():
    # The learner's one-read copy and the actor's one-call assign (the
    # thread backend's fast path) keep Keras' order, shapes and values.
    config = Config(num_envs=2, unroll_length=4, seed=3, jit_compile=False)
    actor = actor_lib.LocalActor(config)
    learner = learner_lib.Learner(config, envs.env_spaces(config.env_id)[0],
                                  actor.head_sizes)
    weights = learner.get_weights()
    expected = learner.model.get_weights()
    assert [w.shape for w in weights] == [w.shape for w in expected]
    for got, want in zip(weights, expected):
        np.testing.assert_array_equal(got, want)
    rng = np.random.default_rng(0)
    fresh = [rng.normal(size=w.shape).astype(np.float32) for w in weights]
    actor.set_weights(fresh, 7)
    assert actor.version == 7
    for got, want in zip(actor.model.get_weights(), fresh):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="expected 12 arrays"):
        actor.set_weights(fresh[:-1], 8)
    wrong = list(fresh)
    wrong[0] = wrong[0].T
    with pytest.raises(ValueError, match=r"has shape \(4, 64\), got \(64, 4\)"):
        actor.set_weights(wrong, 8)
    actor.close()


def _mlp_float64(weights_by_layer, observations, hidden_layers):
    """The `mlp` network from its definition, in float64: tanh towers,
    linear logits and value."""
    def dense(x, layer):
        kernel, bias = weights_by_layer[layer]
        return x @ kernel.astype(np.float64) + bias.astype(np.float64)
    towers = {}
    for tower in ("policy", "value"):
        x = observations.astype(np.float64).reshape(len(observations), -1)
        for i in range(hidden_layers):
            x = np.tanh(dense(x, f"{tower}_{i}"))
        towers[tower] = x
    return dense(towers["policy"], "logits"), dense(towers["value"], "value")[:, 0]


@pytest.mark.parametrize("hidden_sizes, head_sizes", [((64, 64), (2,)),
                                                      ((32,), (3, 2)),
                                                      ((16, 8, 4), (5,))])
def test_mlp_numpy_forward_and_keras_match_the_float64_definition(hidden_sizes,
                                                                  head_sizes):
    # The actor's NumPy step (`networks.MLPForward`) and the learner's Keras
    # network compute the same policy, each to float32 rounding.
    model = networks.mlp((3, 2), head_sizes, hidden_sizes, seed=0)
    rng = np.random.default_rng(1)
    # Weights far from the initialization (tanh saturating on some units),
    # observations of mixed scale.
    weights = [rng.normal(scale=0.8, size=w.shape).astype(np.float32)
               for w in model.get_weights()]
    model.set_weights(weights)
    by_layer = {}
    for variable, array in zip(model.weights, weights):
        layer, kind = variable.path.split("/")[-2:]
        by_layer.setdefault(layer, [None, None])[kind == "bias"] = array
    observations = (rng.normal(size=(16, 3, 2))
                    * rng.choice([0.1, 1., 5.], size=(16, 3, 2))).astype(np.float32)
    want_logits, want_values = _mlp_float64(by_layer, observations,
                                            len(hidden_sizes))
    forward = networks.MLPForward(model)
    forward.set_weights(weights)
    logits, values = forward(observations)
    keras_logits, keras_values = (np.asarray(x) for x in model(observations))
    assert logits.dtype == values.dtype == np.float32
    assert logits.shape == (16, sum(head_sizes)) and values.shape == (16,)
    n_reduced = 6 + sum(hidden_sizes)  # the fan-ins along one path
    for got_logits, got_values in ((logits, values), (keras_logits, keras_values)):
        assert_close_to_rounding(got_logits, want_logits, np.float32, n_reduced)
        assert_close_to_rounding(got_values, want_values, np.float32, n_reduced)


def test_actor_numpy_and_tensorflow_inference_act_alike():
    # Same seed, same weights: the NumPy step ("auto" for the MLP) and the
    # compiled TensorFlow step give the same actions and behaviour logits
    # to float32 rounding.
    unrolls = {}
    for inference in ("auto", "tensorflow"):
        config = Config(num_envs=3, unroll_length=30, seed=2, jit_compile=False,
                        actor_inference=inference)
        actor = actor_lib.LocalActor(config)
        assert (actor._numpy_policy is not None) == (inference == "auto")
        rng = np.random.default_rng(5)
        actor.set_weights([rng.normal(scale=0.5, size=w.shape).astype(np.float32)
                           for w in actor.model.get_weights()], 1)
        unrolls[inference] = actor.collect()
        actor.close()
    np.testing.assert_array_equal(unrolls["auto"]["actions"],
                                  unrolls["tensorflow"]["actions"])
    assert_close_to_rounding(unrolls["auto"]["behaviour_logits"],
                             unrolls["tensorflow"]["behaviour_logits"],
                             np.float32, 4 + 64 + 64)


def test_summary_is_strict_json_with_null_before_the_first_episode(tmp_path):
    # 4 steps per env: a CartPole episode lasts at least 8 (the pole starts
    # within ±0.05 rad, falls past 0.21 rad), so none has finished.
    config = Config(backend="local", num_envs=2, unroll_length=4, total_env_steps=8,
                    jit_compile=False)
    summary = train_lib.train(config, str(tmp_path), progress=False)

    def refuse(constant):
        raise ValueError(f"summary.json holds {constant}, which JSON does not have")

    written = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)
    assert written["mean_return_last_100"] is None and written["env_steps"] == 8
    assert written == summary
