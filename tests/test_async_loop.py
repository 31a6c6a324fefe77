"""The asynchronous default: `ThreadActors` act in real threads while the
learner learns. Their unrolls are `LocalActor`'s (same seeds, same
contract); a bounded queue; exactly the updates' unrolls are acted, so the
end of a run leaves none behind; a stop hands in the started ones (bounded
in time) and `close` counts the dropped ones; a
raising actor is replaced, too many failures stop the run with the
checkpoint, policy and summary written; nothing deadlocks. (Ctrl-C,
SIGTERM and SIGKILL + resume of the default backend: test_agent_pipeline.)"""
import csv
import json
import threading
import time

import backlog
import gymnasium as gym
import numpy as np
import pytest
from tolerances import POLL_TIMEOUT_S

from tf_vtrace.agent import __main__ as cli
from tf_vtrace.agent import _loop_stats, _progress, _stop, actor, backends, policy_lag
from tf_vtrace.agent import train as train_lib
from tf_vtrace.agent.config import Config

SMALL = Config(num_envs=3, unroll_length=5, jit_compile=False,
               total_env_steps=15 * 6)

class CountsSteps(gym.Wrapper):
    """CartPole that calls `on_step(n)` before its n-th step (counted over
    resets)."""

    def __init__(self, env, on_step):
        super().__init__(env)
        self.steps, self.on_step = 0, on_step

    def step(self, action):
        self.steps += 1
        self.on_step(self.steps)
        return self.env.step(action)


def _register(env_id, on_step):
    if env_id not in gym.registry:
        gym.register(env_id, max_episode_steps=500,
                     entry_point=lambda **kw: CountsSteps(
                         gym.make("CartPole-v1", **kw).unwrapped, on_step))


# Each env instance raises from its step FAIL_AT_STEP[0] on.
RAISING_ENV_ID = "tf_vtrace_test/CartPoleRaises-v0"
FAIL_AT_STEP = [12]


def _raise_from_fail_step(steps):
    if steps >= FAIL_AT_STEP[0]:
        raise RuntimeError(f"boom at step {steps}")


# Each env instance's step waits for HANG_RELEASE from its HANG_AT_STEP[0]-th
# step on (None: never).
HANGING_ENV_ID = "tf_vtrace_test/CartPoleHangs-v0"
HANG_AT_STEP, HANG_RELEASE = [None], threading.Event()


def _hang_from_hang_step(steps):
    if HANG_AT_STEP[0] is not None and steps >= HANG_AT_STEP[0]:
        HANG_RELEASE.wait(POLL_TIMEOUT_S)


# The envs of actor thread 1 raise from their 12th step on; actor 0's never.
RAISING_IN_ACTOR_1_ID = "tf_vtrace_test/CartPoleRaisesInActor1-v0"


def _raise_in_actor_1(steps):
    if threading.current_thread().name == "tf_vtrace-actor-1" and steps >= 12:
        raise RuntimeError(f"boom at step {steps}")


_register(RAISING_ENV_ID, _raise_from_fail_step)
_register(HANGING_ENV_ID, _hang_from_hang_step)
_register(RAISING_IN_ACTOR_1_ID, _raise_in_actor_1)


def _weights(config):
    return actor.LocalActor(config.replace(backend="local", num_actors=1)
                            ).model.get_weights()


def _wait_until(condition, what):
    deadline = time.time() + POLL_TIMEOUT_S
    while not condition():
        assert time.time() < deadline, f"{what} within {POLL_TIMEOUT_S} s"
        time.sleep(0.02)


def test_thread_actor_gives_the_local_actors_unrolls():
    """One thread with fixed weights acts exactly the unrolls a `LocalActor`
    of the same seed acts, in order: same keys, shapes, dtypes and values;
    each carries the version of the weights it was acted with."""
    # Weights of another seed than the actors' own initial ones: version 0
    # must still be set (a thread that compared with its actor's version,
    # 0 before any weights, kept its own).
    weights = _weights(SMALL.replace(seed=9))
    local = actor.LocalActor(SMALL.replace(backend="local"))
    local.set_weights(weights, 0)
    threads = backends.make_actors(SMALL)
    assert isinstance(threads, backends.ThreadActors)
    try:
        threads.set_weights(weights, 0)
        for _ in range(3):
            theirs, ours = threads.collect(), local.collect()
            assert set(theirs) == set(actor.UNROLL_KEYS) == set(ours)
            for key in actor.UNROLL_KEYS:
                assert np.asarray(theirs[key]).dtype == np.asarray(ours[key]).dtype
                np.testing.assert_array_equal(theirs[key], ours[key], err_msg=key)
            assert int(theirs["policy_version"]) == 0
    finally:
        threads.close()
        local.close()


def test_the_actor_thread_prepares_while_the_learner_is_behind():
    """Not collected from, the actor fills a queue of 4 and acts a fifth
    unroll: those queued with fewer than half the queue full (the 1st, the
    2nd) go as acted, for the learner to convert; those queued behind at
    least two (3rd to 5th) through `prepare`, on the actor's thread."""
    config = SMALL.replace(queue_size=4)
    prepared_on = []

    def prepare(unroll):
        prepared_on.append(threading.current_thread().name)
        return dict(unroll, prepared=True)

    actors = backends.make_actors(config, prepare=prepare)
    try:
        actors.set_weights(_weights(config), 0)
        _wait_for_a_waiting_actor(actors)
        assert [actors.collect().get("prepared", False)
                for _ in range(5)] == [False, False, True, True, True]
        assert prepared_on == ["tf_vtrace-actor-0"] * 3
    finally:
        actors.close()


def _wait_for_a_waiting_actor(actors):
    """Until the queue is full and the one actor thread waits on `put` with
    the next unroll acted (`queue_size` + 1 started)."""
    _wait_until(lambda: actors._queue.qsize() == actors.config.queue_size
                and actors._waiting and actors._acting == actors.config.queue_size + 1,
                "a full queue and a waiting actor")


def test_actors_run_ahead_by_the_queue_and_act_exactly_the_updates():
    """Not collected from, one actor fills the queue (`queue_size` 2), acts
    one more and then waits, idle; collected from, it acts the run's 6
    updates' unrolls from update 2 on (4) and no more: a fifth collect
    fails at once instead of hanging, nothing is left to drop."""
    config = SMALL.replace(queue_size=2)
    actors = backends.ThreadActors(config, start_update=2)
    try:
        actors.set_weights(_weights(config), 2)
        # Queue full and the third unroll acted: the thread waits on `put`
        # (under load acting it can take longer than the sleep below).
        _wait_for_a_waiting_actor(actors)
        idle = actors.idle_seconds()
        time.sleep(0.5)
        assert actors.idle_seconds() - idle > 0.4  # waiting on the full queue
        assert actors._acting == 3  # 2 queued, 1 in hand
        for _ in range(4):
            assert actors.collect()["observations"].shape == (6, 3, 4)
        assert actors.unrolls_per_actor == [4]
        with pytest.raises(backends.ActorFailure, match="every actor thread"):
            actors.collect()
    finally:
        actors.close()
    assert actors.discarded_unrolls == 0
    assert not any(t.is_alive() for t in actors._threads)


def test_stop_acting_hands_in_the_started_unrolls_and_no_more():
    """At a stop the learner takes what the actor had started: the two
    queued unrolls and the one it waits to queue, then nothing more is
    acted (the thread ends) and nothing is left to drop."""
    config = SMALL.replace(queue_size=2, total_env_steps=15 * 100)
    actors = backends.ThreadActors(config)
    try:
        actors.set_weights(_weights(config), 0)
        _wait_for_a_waiting_actor(actors)
        actors.stop_acting(POLL_TIMEOUT_S)
        assert actors.pending() == 3
        for left in (2, 1, 0):
            assert actors.collect()["observations"].shape == (6, 3, 4)
            assert actors.pending() == left
        _wait_until(lambda: not actors._threads[0].is_alive(),
                    "the thread to end")
        assert actors.unrolls_per_actor == [3]
        with pytest.raises(backends.ActorFailure, match="every actor thread"):
            actors.collect()
    finally:
        actors.close()
    assert actors.discarded_unrolls == 0


def test_a_stop_gives_up_on_an_actor_that_hangs():
    """An actor stuck in its env's step (from step 8: in its second unroll
    of 5 steps): after the stop's time allowance `collect` raises instead
    of waiting for it (a scheduler's grace period must still see the
    checkpoint written); `close` then counts its unroll as dropped."""
    config = Config(env_id=HANGING_ENV_ID, num_envs=2, unroll_length=5,
                    jit_compile=False, total_env_steps=10 * 100)
    HANG_AT_STEP[0] = 8
    actors = backends.make_actors(config)
    try:
        actors.set_weights(_weights(config.replace(env_id="CartPole-v1")), 0)
        actors.collect()
        start = time.monotonic()
        actors.stop_acting(0.5)
        assert actors.pending() == 1
        with pytest.raises(backends.ActorFailure, match="did not hand in"):
            actors.collect()
        assert 0.5 <= time.monotonic() - start < POLL_TIMEOUT_S
        assert actors.pending() == 1
    finally:
        HANG_AT_STEP[0] = None
        HANG_RELEASE.set()
        actors.close()
        HANG_RELEASE.clear()
    assert actors.discarded_unrolls == 1


def test_a_stopped_run_learns_on_the_unrolls_the_actor_had_started(tmp_path):
    """`_stop.drain`, as Ctrl-C runs it: every unroll the actor had
    started (queued or being acted) is learned on and recorded, and no
    more is acted. Not in a multi-worker run (its hosts' updates must
    match)."""
    config = SMALL.replace(queue_size=2, total_env_steps=15 * 100)
    learner, actors = _learner(config), backends.make_actors(config)
    loop = train_lib._UpdateLoop(config, str(tmp_path), learner, resumed=False)
    loop.actor, loop.loop_start = actors, time.time()
    loop.recorder = train_lib.recording.Recorder(str(tmp_path))
    loop.bar = _progress.ProgressBar(config, False, loop.counters)
    try:
        actors.set_weights(learner.get_weights(), 0)
        _wait_for_a_waiting_actor(actors)
        loop._update()  # Two queued: both in one call (updates_per_call 2).
        assert loop.counters.updates == 2 and loop.calls == 1
        _wait_for_a_waiting_actor(actors)
        loop.config = config.replace(strategy="multi_worker")
        _stop.drain(loop)
        assert loop.counters.updates == 2 and actors.pending() == 3
        loop.config = config
        _stop.drain(loop)
        assert loop.counters.updates == 5 and actors.pending() == 0
        assert actors.unrolls_per_actor == [5]
    finally:
        loop.recorder.close()
        actors.close()
    assert actors.discarded_unrolls == 0


def _learner(config):
    from tf_vtrace.agent import envs, learner
    observation_space, action_space = envs.env_spaces(config.env_id)
    return learner.Learner(config, observation_space,
                           envs.head_sizes(action_space))


def test_close_stops_acting_threads_and_counts_what_it_drops():
    """`close` while the threads act and wait on the full queue returns
    promptly (no deadlock), with the queued and half-acted unrolls counted
    as dropped."""
    config = SMALL.replace(num_actors=2, total_env_steps=15 * 1000)
    actors = backends.make_actors(config)
    actors.set_weights(_weights(config), 0)
    actors.collect()
    _wait_until(lambda: actors._queue.qsize() == config.queue_size,
                "a full queue")
    start = time.time()
    actors.close()
    assert time.time() - start < 30
    assert not any(t.is_alive() for t in actors._threads)
    # The full queue's and at most one in the hands of each actor.
    assert (config.queue_size <= actors.discarded_unrolls
            <= config.queue_size + config.num_actors)


def test_a_raising_actor_thread_is_replaced_then_stops_the_run():
    """Every env raises on its 12th step: the actor gives two unrolls of 5
    steps, then fails; with max_actor_failures 2 it is replaced (acting
    the current weights) and the run goes on. Then every step raises: two
    failures in a row raise `ActorFailure` with the traceback."""
    config = Config(env_id=RAISING_ENV_ID, num_envs=2, unroll_length=5,
                    jit_compile=False, max_actor_failures=2,
                    total_env_steps=10 * 100)
    weights = _weights(config.replace(env_id="CartPole-v1"))
    actors = backends.make_actors(config)
    try:
        actors.set_weights(weights, 0)
        actors.collect(), actors.collect()
        actors.set_weights(weights, 5)
        unroll = actors.collect()  # after the first failure
        assert actors.restarts_per_actor == [1]
        assert int(unroll["policy_version"]) == 5
        FAIL_AT_STEP[0] = 1
        with pytest.raises(backends.ActorFailure,
                           match=r"(?s)actor 0 failed 2 times in a row.*"
                                 r"max_actor_failures=2.*RuntimeError: boom"):
            for _ in range(2):  # one unroll acted before may come first
                actors.collect()
        assert actors.restarts_per_actor == [2]
    finally:
        FAIL_AT_STEP[0] = 12
        actors.close()
    assert not any(t.is_alive() for t in actors._threads)


def test_a_run_whose_actor_keeps_failing_writes_everything(tmp_path):
    """`train` with an actor that fails at once on every replacement too:
    `ActorFailure` after the checkpoint, the policy and the summary."""
    config = Config(env_id=RAISING_ENV_ID, num_envs=2, unroll_length=5,
                    jit_compile=False, max_actor_failures=1,
                    total_env_steps=10 * 100)
    with pytest.raises(backends.ActorFailure, match="boom at step 12"):
        train_lib.train(config, str(tmp_path), progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["learner_updates"] == 2 and summary["backend"] == "thread"
    assert "boom" in summary["error"]
    assert (tmp_path / "policy" / "saved_model.pb").exists()


def test_a_run_stopped_by_an_actor_failure_learns_on_the_others_unrolls(
        tmp_path):
    """Two actor threads; actor 1 fails (max_actor_failures 1) in its third
    unroll: the run stops with `ActorFailure`, after learning on what actor
    0 had queued or was acting. Every unroll acted is learned on; none is
    dropped."""
    config = Config(env_id=RAISING_IN_ACTOR_1_ID, num_envs=2, unroll_length=5,
                    jit_compile=False, num_actors=2, max_actor_failures=1,
                    total_env_steps=10 * 1000)
    with pytest.raises(backends.ActorFailure, match="actor 1 failed"):
        train_lib.train(config, str(tmp_path), progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "boom" in summary["error"]
    assert summary["unrolls_per_actor"][1] == 2
    assert sum(summary["unrolls_per_actor"]) == summary["learner_updates"]
    assert summary["discarded_unrolls"] == 0


def test_async_run_learns_on_every_unroll_and_reports_lag_and_idle(tmp_path):
    """A finished run of the default backend: one unroll per update, none
    dropped; lags counted for each, at least one above 0 (acting
    overlapped learning: with the synchronous loop every lag is 0 here);
    both idle fractions measured, in [0, 1]."""
    config = SMALL.replace(total_env_steps=15 * 30)
    summary = train_lib.train(config, str(tmp_path), progress=False)
    assert summary["backend"] == "thread" and summary["learner_updates"] == 30
    assert summary["unrolls_per_actor"] == [30]
    assert summary["discarded_unrolls"] == 0
    counts = {int(k): n for k, n in summary["policy_lag_counts"].items()}
    assert sum(counts.values()) == 30 and max(counts) >= 1
    # Behind it: the queue, the unroll it was acted after and, where the
    # learner took queued unrolls into its call, the others of the call.
    assert max(counts) <= config.queue_size + config.updates_per_call
    for key in ("learner_idle_fraction", "actor_idle_fraction"):
        assert 0 <= summary[key] <= 1, key
    sync = train_lib.train(config.replace(backend="local"),
                           str(tmp_path / "sync"), progress=False)
    assert sync["policy_lag_counts"] == {"0": 30}
    assert sync["learner_idle_fraction"] + sync["actor_idle_fraction"] == \
        pytest.approx(1, abs=1e-3)


def _kept_checkpoints(out_dir):
    """The numbers of the checkpoints in ``out_dir/checkpoints``."""
    return sorted(int(path.name[len("ckpt-"):-len(".index")]) for path in
                  (out_dir / "checkpoints").glob("ckpt-*.index"))


@pytest.mark.parametrize("changes, kept", [
    # Never due in the run: the one at the end only.
    (dict(checkpoint_every_s=3600.), [6]),
    # Due after every update: the last two kept (one update per learner
    # call: two in one call are one checkpoint).
    (dict(checkpoint_every_s=1e-9, updates_per_call=1), [5, 6]),
    # An update count, where given, rules: 2, 4 (and 6, the end).
    (dict(checkpoint_every_s=1e-9, checkpoint_every=2), [4, 6]),
])
def test_checkpoints_are_timed_unless_an_update_count_is_given(
        tmp_path, changes, kept):
    config = SMALL.replace(**changes)
    train_lib.train(config, str(tmp_path), progress=False)
    assert _kept_checkpoints(tmp_path) == kept


def test_a_learner_call_stops_where_a_checkpoint_an_evaluation_or_the_end_comes(
        tmp_path, monkeypatch):
    """Up to 3 updates per call, 11 updates, a checkpoint every 4 and an
    evaluation every 5: the calls are 1-3, 4, 5, 6-8, 9-10, 11, so that the
    checkpoints (4, 8, the end) and the evaluations (5, 10, the end) come
    after the updates they are due after, as with one update per call."""
    config = SMALL.replace(backend="local", updates_per_call=3,
                           total_env_steps=15 * 11, checkpoint_every=4,
                           eval_every=15 * 5, eval_episodes=1)
    backlog.use_always_queued(monkeypatch)
    summary = train_lib.train(config, str(tmp_path), progress=False)
    assert summary["learner_updates"] == 11
    assert summary["updates_per_learner_call"] == round(11 / 6, 3)
    assert _kept_checkpoints(tmp_path) == [8, 11]
    with open(tmp_path / "evaluations.csv") as handle:
        assert [int(row["update"]) for row in csv.DictReader(handle)] == [5, 10, 11]
    # Each call's unrolls were acted with the weights before it: lags 0,
    # 1, 2 in the calls of 3, 0, 1 in the call of 2, 0 in the calls of 1.
    assert summary["policy_lag_counts"] == {"0": 6, "1": 3, "2": 2}


def test_the_learner_takes_the_queued_unrolls_into_one_call():
    """The queue full, one step of the loop with room for 2 makes two
    updates in one call, on the two oldest unrolls: both acted with the
    weights of version 0, the second learned after the first (lag 1).
    `collect_queued` never waits: with nothing queued it gives None."""
    config = SMALL.replace(queue_size=2, updates_per_call=2)
    learner = _learner(config)
    history = policy_lag.WeightHistory(0)
    history.push(0, learner.get_weights())
    actors = backends.make_actors(config)
    try:
        actors.set_weights(learner.get_weights(), 0)
        _wait_for_a_waiting_actor(actors)
        steps = train_lib.actor_learner_steps(actors, learner, history,
                                              most=2)
        assert [d["policy_lag"] for _, d in steps] == [0, 1]
        assert [int(u["policy_version"]) for u, _ in steps] == [0, 0]
        assert learner.version == 2 == history.newest_version
        assert actors.unrolls_per_actor == [2]
        backlog.assert_collect_queued_does_not_wait(actors)
    finally:
        actors.close()


def test_a_failure_queued_behind_an_unroll_is_left_for_collect():
    """`collect_queued` takes unrolls only: a failure queued first is put
    aside, and the next `collect` handles it (here: `ActorFailure`, after
    max_actor_failures 1), so the unroll collected before is not lost."""
    config = Config(env_id=RAISING_ENV_ID, num_envs=2, unroll_length=5,
                    jit_compile=False, max_actor_failures=1,
                    total_env_steps=10 * 100)
    actors = backends.make_actors(config)
    try:
        actors.set_weights(_weights(config.replace(env_id="CartPole-v1")), 0)
        # Steps 1-10: two unrolls; the 12th step raises in the third.
        _wait_until(lambda: actors._queue.qsize() == 3,
                    "two unrolls and a failure queued")
        assert actors.collect() is not None
        assert actors.collect_queued() is not None
        assert actors.collect_queued() is None
        assert actors.collect_queued() is None  # Still put aside.
        with pytest.raises(backends.ActorFailure, match="RuntimeError: boom"):
            actors.collect()
        assert actors.unrolls_per_actor == [2]
    finally:
        actors.close()


def test_a_multi_worker_run_checkpoints_by_updates():
    """Its hosts must checkpoint at the same update; their clocks differ."""
    assert Config().checkpoint_updates is None
    assert Config(checkpoint_every=7).checkpoint_updates == 7
    assert Config(strategy="multi_worker").checkpoint_updates == 200
    assert Config(strategy="multi_worker",
                  checkpoint_every=7).checkpoint_updates == 7


class _IdleClock:
    """An actor backend's `idle_seconds` and `unrolls_per_actor`, advanced
    by the test."""

    def __init__(self, unrolls_per_actor=(1,)):
        self.seconds = 0.
        self.unrolls_per_actor = list(unrolls_per_actor)

    def idle_seconds(self):
        return self.seconds


def test_idle_fractions_start_once_every_actor_has_given_an_unroll():
    """An actor still starting (or compiling its first unroll) is not
    waiting for the learner: the count starts at the first update after
    every actor has given an unroll, so the 10 s of that start never reach
    the fractions."""
    idle, actors = _loop_stats.IdleClock(SMALL.replace(num_actors=2)), _IdleClock((3, 0))
    idle.warm(actors)
    actors.seconds += 10.
    actors.unrolls_per_actor = [4, 1]
    idle.warm(actors)
    time.sleep(0.05)
    idle.finish(actors)
    assert idle.fractions()["actor_idle_fraction"] == 0.


def test_idle_fractions_start_after_the_first_update_is_recorded(
        tmp_path, monkeypatch):
    """The first record traces the TensorBoard writer (≈ 0.14 s, the
    actors waiting meanwhile): a start-up cost like the first compile, so
    the fractions start after it, as do the warm rates."""
    from tf_vtrace.agent import recording
    events = []
    record, warm = recording.Recorder.record, _loop_stats.IdleClock.warm

    def logged_record(self, *args, **kwargs):
        events.append("record")
        return record(self, *args, **kwargs)

    def logged_warm(self, actor):
        started = self.start is not None
        warm(self, actor)
        if not started and self.start is not None:
            events.append("warm")

    monkeypatch.setattr(recording.Recorder, "record", logged_record)
    monkeypatch.setattr(_loop_stats.IdleClock, "warm", logged_warm)
    train_lib.train(SMALL.replace(backend="local"), str(tmp_path),
                    progress=False)
    assert events[:2] == ["record", "warm"], events[:4]


def test_idle_fractions_leave_out_the_evaluations():
    """Outside a pause (an evaluation) the learner waited 0.1 s and the
    actors 0.05 s of at least 0.2 s; during the 0.3-s pause the actors
    waited 0.3 s more. The fractions are of the time outside the pause
    only: counting the pause would give the actors 0.35 / 0.5 = 0.7."""
    idle, actors = _loop_stats.IdleClock(SMALL), _IdleClock()
    start = time.time()
    idle.warm(actors)
    time.sleep(0.2)
    idle.collect_s += 0.1
    actors.seconds += 0.05
    with idle.paused(actors):
        actors.seconds += 0.3
        time.sleep(0.3)
    idle.finish(actors)
    # Outside the pause: at least 0.2 s, at most all but its 0.3 s.
    longest = time.time() - start - 0.3
    fractions = idle.fractions()
    for key, waited in (("learner_idle_fraction", 0.1), ("actor_idle_fraction", 0.05)):
        assert waited / longest - 5e-4 <= fractions[key] <= waited / 0.2 + 5e-4, (
            key, fractions, longest)


def test_sync_flag_is_the_local_backend():
    parser, _ = cli._parser()
    assert parser.parse_args(["train", "--out", "x"]).backend == "thread"
    assert parser.parse_args(["train", "--out", "x", "--sync"]).backend == "local"
    with pytest.raises(ValueError, match=r"Config\.queue_size"):
        Config(queue_size=0)
