"""The process and Ray actor backends keep LocalActor's unroll contract,
serve their actors fairly, and run the demo's train loop from the command
line.

Real worker processes run real CartPole envs. With one actor the unrolls must
equal a LocalActor's with the same seed and weights; with two, every unroll
has LocalActor's keys, shapes and dtypes, and ``policy_version`` follows
`set_weights` (the two unrolls in flight when new weights arrive keep the old
version, every later one has the new).
"""
import json
import os
import subprocess
import sys
import time

import backlog
import numpy as np
import pytest
from tolerances import POLL_TIMEOUT_S, SUBPROCESS_TIMEOUT_S

from tf_vtrace.agent import actor, backends
from tf_vtrace.agent.config import Config


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_backend_matches_local_actor(backend):
    config = Config(num_envs=3, unroll_length=4, max_episode_steps=3,
                    jit_compile=False, backend=backend, num_actors=1)
    local = actor.LocalActor(config.replace(backend="local"))
    weights = local.model.get_weights()
    local.set_weights(weights, 5)
    expected = [local.collect() for _ in range(2)]
    for num_actors in (1, 2):
        remote = backends.make_actors(config.replace(num_actors=num_actors))
        try:
            remote.set_weights(weights, 5)
            got = [remote.collect() for _ in range(2)]
            remote.set_weights(weights, 9)
            # The second actor may still be starting TensorFlow while the
            # first serves many unrolls: wait for it, bounded in time.
            versions, deadline = [], time.time() + POLL_TIMEOUT_S
            while versions.count(5) < num_actors and time.time() < deadline:
                versions.append(int(remote.collect()["policy_version"]))
        finally:
            remote.close()
        for want_unroll, unroll in zip(expected, got):
            assert sorted(actor.UNROLL_KEYS) == sorted(unroll)
            for key in actor.UNROLL_KEYS:
                want, have = np.asarray(want_unroll[key]), np.asarray(unroll[key])
                assert want.shape[1:] == have.shape[1:] or key.startswith("episode"), key
                assert want.dtype == have.dtype, key
                if num_actors == 1:
                    np.testing.assert_allclose(have, want, atol=1e-6, err_msg=key)
        assert versions.count(5) == num_actors and set(versions) <= {5, 9}, versions


def _wait_until_every_unroll_is_ready(actors, timeout_s=POLL_TIMEOUT_S):
    """Polls (without taking any) until every actor has an unroll ready: a
    fixed sleep, however long unloaded, can end before a loaded actor is done."""
    deadline = time.time() + timeout_s
    while len(actors._poll(list(actors._in_flight), block=False)) < actors.num_actors:
        assert time.time() < deadline, f"not every actor was ready within {timeout_s} s"
        time.sleep(0.02)


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_ready_unrolls_are_taken_oldest_first(backend):
    """A learner slower than its actors: every actor has an unroll ready at
    each `collect`. Taking the oldest-ready one first serves the actors in
    turn, so over 4 rounds each of 3 actors gives 4 unrolls, and every
    unroll was acted with the weights of 3 versions ago (it waited while the
    other two were learned on). Taking, say, the lowest-numbered ready actor
    would starve the others and show lags of 1."""
    num_actors, rounds = 3, 4
    config = Config(num_envs=2, unroll_length=4, jit_compile=False,
                    backend=backend, num_actors=num_actors)
    weights = actor.LocalActor(config.replace(backend="local",
                                              num_actors=1)).model.get_weights()
    actors = backends.make_actors(config)
    version = 0
    try:
        actors.set_weights(weights, version)
        # Warm-up: until every actor has started and given one unroll.
        deadline = time.time() + POLL_TIMEOUT_S
        while min(actors.unrolls_per_actor) == 0 and time.time() < deadline:
            actors.collect()
            version += 1
            actors.set_weights(weights, version)
        before = list(actors.unrolls_per_actor)
        lags = []
        for _ in range(rounds * num_actors):
            # The "learner" takes longer than an unroll of 4 steps.
            _wait_until_every_unroll_is_ready(actors)
            lags.append(version - int(actors.collect()["policy_version"]))
            version += 1
            actors.set_weights(weights, version)
        counts = [after - b for after, b in zip(actors.unrolls_per_actor, before)]
    finally:
        actors.close()
    assert min(before) >= 1, before
    assert max(counts) - min(counts) <= 1 and sum(counts) == rounds * num_actors, counts
    assert sorted(lags)[len(lags) // 2] == num_actors, lags


def _two_process_actors():
    """A policy's initial weights and two process actors of small unrolls
    (2 envs × 4 steps)."""
    config = Config(num_envs=2, unroll_length=4, jit_compile=False,
                    backend="process", num_actors=2)
    weights = actor.LocalActor(config.replace(backend="local", num_actors=1)
                               ).model.get_weights()
    return weights, backends.make_actors(config)


def test_a_stop_takes_the_process_actors_unrolls_in_flight():
    """After `stop_acting` the unrolls in flight (one per actor) are still
    collected, no more is asked for, and nothing is left to drop. (That a
    finished run leaves none in flight: the command-line runs below.)"""
    weights, actors = _two_process_actors()
    try:
        actors.set_weights(weights, 0)
        actors.collect()  # Its actor is asked again at once.
        assert actors.pending() == 2
        actors.stop_acting(POLL_TIMEOUT_S)
        for left in (1, 0):
            assert actors.collect()["observations"].shape == (5, 2, 4)
            assert actors.pending() == left
        assert sum(actors.unrolls_per_actor) == 3
        with pytest.raises(backends.ActorFailure, match="no unroll is left"):
            actors.collect()
    finally:
        actors.close()
    assert actors.discarded_unrolls == 0


def test_the_process_actors_ready_unrolls_are_queued_for_one_call():
    """`collect_queued` takes the unrolls already ready behind the one
    `collect` gave, oldest first, each actor asked again at once (with the
    weights it holds: the call's updates come after); it never waits, and
    with none in flight it gives None at once."""
    weights, actors = _two_process_actors()
    try:
        actors.set_weights(weights, 0)
        deadline = time.time() + POLL_TIMEOUT_S
        while min(actors.unrolls_per_actor) == 0 and time.time() < deadline:
            actors.collect()  # Until both workers have started.
        actors.set_weights(weights, 1)
        _wait_until_every_unroll_is_ready(actors)
        first = min(actors._in_flight, key=actors._in_flight.__getitem__)
        before = list(actors.unrolls_per_actor)
        taken = [actors.collect(), actors.collect_queued()]
        assert all(u["observations"].shape == (5, 2, 4) for u in taken)
        assert [after - b for after, b in zip(actors.unrolls_per_actor, before)
                ] == [1, 1], (first, before, actors.unrolls_per_actor)
        assert actors.pending() == 2  # Both asked again.
        backlog.assert_collect_queued_does_not_wait(actors)
    finally:
        actors.close()
    assert actors.discarded_unrolls == 0


def test_a_process_actor_idles_while_the_learner_is_slower():
    """A learner that takes 1 s longer than an unroll of 8 env steps (it
    sleeps once the unroll it will take next is ready): over that second
    the actor was idle but for the one unroll taken in it (acted before it
    began, counted when it arrives: a few ms here, 0.5 s allowed), and
    never for longer than the wall time."""
    config = Config(num_envs=2, unroll_length=4, jit_compile=False,
                    backend="process", num_actors=1)
    weights = actor.LocalActor(config.replace(backend="local")).model.get_weights()
    actors = backends.make_actors(config)
    try:
        actors.set_weights(weights, 0)
        actors.collect()  # Started (TensorFlow imported); the next requested.
        _wait_until_every_unroll_is_ready(actors)
        start = time.perf_counter()
        idle_before = actors.idle_seconds()
        time.sleep(1.)
        actors.collect()
        waited = actors.idle_seconds() - idle_before
        wall = time.perf_counter() - start
    finally:
        actors.close()
    assert 0.5 <= waited <= wall, (waited, wall)


# The LSTM core with both pathways (`--separate-value-core`).
LSTM_FLAGS = ("--core", "lstm", "--core-size", "8", "--separate-value-core",
              "true")


# The Ray runs are `slow`: the Ray backend's contract and fairness tests
# above, and the recurrent one in test_recurrent.py, run by default.
@pytest.mark.parametrize("backend, core_flags", [
    ("process", ()),
    pytest.param("ray", (), marks=pytest.mark.slow),
    pytest.param("ray", LSTM_FLAGS, marks=pytest.mark.slow, id="ray-lstm")])
def test_command_line_trains_with_two_actors(backend, core_flags, tmp_path):
    """`python -m tf_vtrace.agent train --backend B --num-actors 2`, a short
    run (feed-forward, or with an LSTM core on Ray): the policy is exported
    and summary.json records the backend, the unrolls of each actor and the
    measured policy lag, consistently."""
    out = tmp_path / "run"
    updates = 40
    result = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "train", "--out", str(out),
         "--backend", backend, "--num-actors", "2", "--num-envs", "4",
         "--unroll-length", "8", "--total-env-steps", str(updates * 32),
         "--jit-compile", "false", "--no-progress", *core_flags],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads(result.stdout.strip().splitlines()[-1]) == summary
    assert (out / "policy" / "saved_model.pb").exists()
    assert summary["backend"] == backend and summary["num_actors"] == 2
    assert summary["learner_updates"] == updates
    assert len(summary["unrolls_per_actor"]) == 2
    assert sum(summary["unrolls_per_actor"]) == updates
    # Asked for the run's unrolls only: none in flight at the end.
    assert summary["discarded_unrolls"] == 0
    counts = {int(lag): n for lag, n in summary["policy_lag_counts"].items()}
    assert sum(counts.values()) == updates
    # The first unroll is acted with the initial weights and learned on first.
    assert min(counts) == 0 and max(counts) == summary["policy_lag_max"]
    mean = sum(lag * n for lag, n in counts.items()) / updates
    assert summary["policy_lag_mean"] == pytest.approx(mean, abs=1e-3)
    assert summary["env_steps_per_s"] > 0 and summary["learner_steps_per_s"] > 0
    for side in ("learner", "actor"):
        assert 0 <= summary[f"{side}_idle_fraction"] <= 1, summary
    if core_flags:
        # The exported policy carries both pathways' state (2 × 8 units).
        import tensorflow as tf
        policy = tf.saved_model.load(str(out / "policy"))
        assert list(policy.core_state_shape.numpy()) == [2, 16]
