"""Every vector env gives the actor's unroll contract, as gymnasium's
`SyncVectorEnv` does: the same keys, shapes and dtypes, and the same
episode-boundary semantics, although gymnasium's NumPy-vectorized CartPole
and EnvPool reset an env one step later than the same-step auto-reset
(`tf_vtrace.agent.envs` adapts them). CartPole's physics pins the
conventions: an episode ends outside the pole-angle or cart-position
bounds, a new one starts within ±0.05 in every coordinate."""
import gymnasium as gym
import numpy as np
import pytest

from tf_vtrace.agent import actor, envs
from tf_vtrace.agent.config import Config

CONCRETE_VECTOR_ENVS = ("gymnasium", "numpy", "envpool")

# Time limit 15: both truncations (at 15 steps) and terminations (CartPole
# with a near-uniform policy falls in 8-40 steps) happen in 3 unrolls of 30.
LIMIT, T, B = 15, 30, 6
THETA_LIMIT, X_LIMIT = 12 * 2 * np.pi / 360, 2.4


@pytest.fixture(scope="module", params=CONCRETE_VECTOR_ENVS)
def unrolls(request):
    if request.param == "envpool":
        pytest.importorskip("envpool")  # the envpool extra; `make test` installs it
    config = Config(num_envs=B, unroll_length=T, max_episode_steps=LIMIT,
                    jit_compile=False, backend="local",
                    vector_env=request.param)
    local = actor.LocalActor(config)
    try:
        yield request.param, [local.collect() for _ in range(3)]
    finally:
        local.close()


def test_keys_shapes_and_dtypes_match_gymnasiums(unrolls):
    name, ours = unrolls
    config = Config(num_envs=B, unroll_length=T, max_episode_steps=LIMIT,
                    jit_compile=False, backend="local", vector_env="gymnasium")
    reference = actor.LocalActor(config)
    theirs = reference.collect()
    reference.close()
    for unroll in ours:
        assert set(unroll) == set(actor.UNROLL_KEYS), name
        for key in actor.UNROLL_KEYS:
            if key.startswith("episode_"):  # [n]: n varies
                assert unroll[key].dtype == theirs[key].dtype, key
                continue
            assert np.shape(unroll[key]) == np.shape(theirs[key]), key
            assert np.asarray(unroll[key]).dtype == np.asarray(theirs[key]).dtype, key


def test_episode_boundaries(unrolls):
    """Where an episode ended at t: x_{t+1} is a fresh start, the ended one's
    last observation is in final_observations[t] (out of bounds when it
    terminated, not when the time limit truncated it); elsewhere the two
    are equal. Terminated and truncated are exclusive, the discount is 0
    exactly at terminations, truncations come exactly at the time limit,
    and each finished episode's return is its length (+1 per step: the
    reset step of EnvPool is not a step of either episode). Seen in a run:
    EnvPool reports a pole that falls on the time limit's step as truncated
    (gymnasium: terminated and truncated, the contract: terminated)."""
    name, ours = unrolls
    lengths = np.zeros(B, int)  # steps into the current episode, per env
    seen_truncation = seen_termination = False
    for unroll in ours:
        term, trunc = unroll["terminated"], unroll["truncated"]
        ended = term | trunc
        assert not (term & trunc).any()
        np.testing.assert_array_equal(unroll["discounts"] == 0, term)
        np.testing.assert_array_equal(unroll["rewards"], 1.)
        np.testing.assert_array_equal(
            unroll["final_observations"][~ended], unroll["observations"][1:][~ended])
        assert (np.abs(unroll["observations"][1:][ended]) <= 0.05).all(), name
        final = unroll["final_observations"]
        out_of_bounds = ((np.abs(final[..., 0]) > X_LIMIT)
                         | (np.abs(final[..., 2]) > THETA_LIMIT))
        np.testing.assert_array_equal(out_of_bounds[term], True)
        if name != "envpool":
            np.testing.assert_array_equal(out_of_bounds[trunc], False)
        # EnvPool calls a fall on the time limit's step a truncation (the
        # one difference left: see `EnvPoolVectorEnv`); the loop below
        # checks that every truncation is on that step.
        assert (unroll["truncation_values"][~trunc] == 0).all()
        finished = []
        for t in range(T):
            lengths += 1
            assert (lengths[trunc[t]] == LIMIT).all()
            assert ended[t][lengths == LIMIT].all()  # terminated wins a tie
            finished += list(lengths[ended[t]])
            lengths[ended[t]] = 0
        # The tracker lists the envs ending at the same step in env order.
        np.testing.assert_array_equal(unroll["episode_lengths"], finished)
        np.testing.assert_array_equal(unroll["episode_returns"], finished)
        seen_truncation |= trunc.any()
        seen_termination |= term.any()
    assert seen_truncation and seen_termination, name


def test_numpy_cartpole_steps_as_gymnasiums_cartpole_env():
    """Each transition of `CartPoleNumpyVectorEnv` is the one gymnasium's
    `CartPoleEnv` makes from the same state with the same action (the
    physics, the reward, the termination); the time limit truncates; an
    ended env restarts at once within ±0.05, its last observation in
    ``final_obs``. Random actions: both pushes from all kinds of states."""
    num_envs, limit = 5, 25
    vector, observations = envs.make_vector_env("CartPole-v1", num_envs, 3,
                                                limit, "numpy")
    assert isinstance(vector, envs.CartPoleNumpyVectorEnv)
    single = gym.make("CartPole-v1").unwrapped
    single.reset(seed=0)
    rng = np.random.default_rng(0)
    counts = {"terminated": 0, "truncated": 0}
    steps = np.zeros(num_envs, int)
    for _ in range(120):
        states = vector.state.T.copy()  # float64 [B, 4], before the step
        np.testing.assert_array_equal(observations, states.astype(np.float32))
        actions = rng.integers(0, 2, num_envs)
        observations, rewards, terminated, truncated, info = vector.step(actions)
        assert rewards.dtype == np.float64
        steps += 1
        ended = terminated | truncated
        np.testing.assert_array_equal(truncated, steps >= limit)
        for i in range(num_envs):
            single.state = states[i].copy()
            single.steps_beyond_terminated = None  # (a live episode)
            expected, reward, done, _, _ = single.step(int(actions[i]))
            assert reward == rewards[i] and done == terminated[i]
            last = info["final_obs"][i] if ended[i] else observations[i]
            np.testing.assert_array_equal(last, expected)
        if ended.any():
            np.testing.assert_array_equal(info["_final_obs"], ended)
            assert (np.abs(observations[ended]) <= 0.05).all()
        counts["terminated"] += terminated.sum()
        counts["truncated"] += truncated.sum()
        steps[ended] = 0
    assert counts["terminated"] > 0 and counts["truncated"] > 0, counts


@pytest.mark.parametrize("actions", [[0, 2, 1], [0, -1, 1], [0, 1],
                                     [0., 1., 1.]])
def test_numpy_cartpole_refuses_actions_outside_its_action_space(actions):
    vector, _ = envs.make_vector_env("CartPole-v1", 3, 0, None, "numpy")
    state = vector.state.copy()
    with pytest.raises(ValueError, match="3 integers in {0, 1}"):
        vector.step(np.asarray(actions))
    np.testing.assert_array_equal(vector.state, state)  # nothing stepped


def test_auto_is_numpy_for_cartpole_and_gymnasium_elsewhere():
    vector, _ = envs.make_vector_env("CartPole-v1", 2, 0, None, "auto")
    assert isinstance(vector, envs.CartPoleNumpyVectorEnv)
    assert vector.max_episode_steps == 500
    vector, _ = envs.make_vector_env("CartPole-v0", 2, 0, None, "auto")
    assert vector.max_episode_steps == 200
    vector, _ = envs.make_vector_env(envs.STATELESS_CARTPOLE_ID, 2, 0, None,
                                     "auto")
    assert isinstance(vector, gym.vector.SyncVectorEnv)


def test_ids_a_vector_env_lacks_are_named():
    with pytest.raises(ValueError, match=r"Config\.vector_env: no NumPy-vectorized"):
        Config(env_id="Acrobot-v1", vector_env="numpy")
    pytest.importorskip("envpool")
    with pytest.raises(ValueError, match=r"Config\.vector_env: EnvPool has no"):
        Config(env_id=envs.MULTI_DISCRETE_ID, vector_env="envpool")
    with pytest.raises(ValueError, match=r"Config\.vector_env must be one of"):
        Config(vector_env="brax")
