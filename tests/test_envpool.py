"""EnvPool's C++ CartPole gives the actor's unroll contract, as gymnasium's
vector env does: the same keys, shapes and dtypes, and the same
episode-boundary semantics, although EnvPool resets an env one step later
than gymnasium's same-step auto-reset (`tf_vtrace.agent.envs`). CartPole's
physics pins the conventions: an episode ends outside the pole-angle or
cart-position bounds, a new one starts within ±0.05 in every coordinate."""
import numpy as np
import pytest

from tf_vtrace.agent import actor, envs
from tf_vtrace.agent.config import Config

pytest.importorskip("envpool")  # the envpool extra; `make test` installs it

# Time limit 15: both truncations (at 15 steps) and terminations (CartPole
# with a near-uniform policy falls in 8-40 steps) happen in 3 unrolls of 30.
LIMIT, T, B = 15, 30, 6
THETA_LIMIT, X_LIMIT = 12 * 2 * np.pi / 360, 2.4


@pytest.fixture(scope="module", params=envs.VECTOR_ENVS)
def unrolls(request):
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
                    jit_compile=False, backend="local")
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
        if name == "gymnasium":
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


def test_envpool_ids_it_lacks_are_named():
    with pytest.raises(ValueError, match=r"Config\.vector_env: EnvPool has no"):
        Config(env_id=envs.MULTI_DISCRETE_ID, vector_env="envpool")
    with pytest.raises(ValueError, match=r"Config\.vector_env must be one of"):
        Config(vector_env="brax")
