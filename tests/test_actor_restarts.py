"""Dead actors are replaced: an actor process SIGKILLed (as by the OOM
killer) or a Ray actor killed is started again with the current weights and
the run goes on; the restarts are counted; `Config.max_actor_failures`
failures of one actor in a row stop it with an `ActorFailure` naming the
actor and how it ended. Real worker processes, real Ray on loopback."""
import os
import signal
import threading
import time

import pytest
from process_tree import actor_pids

from tf_vtrace.agent import actor, backends
from tf_vtrace.agent.config import Config


def _weights(config):
    return actor.LocalActor(config.replace(backend="local", num_actors=1)
                            ).model.get_weights()


def _kill_twice(first_pid, timeout=240):
    """In a thread: SIGKILLs `first_pid`, then the next actor process this
    process starts (its replacement), before it can give an unroll (it is
    still importing TensorFlow)."""
    killed = []

    def kill():
        os.kill(first_pid, signal.SIGKILL)
        killed.append(first_pid)
        deadline = time.time() + timeout
        while time.time() < deadline:
            new = [pid for pid in actor_pids(os.getpid()) if pid != first_pid]
            if new:
                os.kill(new[0], signal.SIGKILL)
                killed.append(new[0])
                return
            time.sleep(0.05)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread, killed


def _one_process_actor():
    """A policy's initial weights and one process actor that may fail once
    in a row (the second failure in a row stops it)."""
    config = Config(num_envs=2, unroll_length=4, jit_compile=False,
                    backend="process", num_actors=1, max_actor_failures=2)
    return _weights(config), backends.make_actors(config)


def test_a_killed_actor_process_is_replaced_until_it_fails_twice_in_a_row():
    weights, actors = _one_process_actor()
    try:
        actors.set_weights(weights, 3)
        actors.collect()
        os.kill(actors._processes[0].pid, signal.SIGKILL)
        actors.set_weights(weights, 4)
        unroll = actors.collect()
        if int(unroll["policy_version"]) == 3:
            # The worker had sent its next unroll before the kill (its
            # request went out with the last collect): delivered, not lost.
            unroll = actors.collect()
        # Replaced; the new worker acts with the current weights.
        assert int(unroll["policy_version"]) == 4
        assert actors.restarts_per_actor == [1]
        # The unroll in between reset the count: two more deaths in a row.
        killer, killed = _kill_twice(actors._processes[0].pid)
        try:
            with pytest.raises(backends.ActorFailure,
                               match=r"(?s)actor 0 failed 2 times in a row .*"
                                     r"max_actor_failures=2.*exit code -9"):
                # At most one unroll sent before the first kill comes first.
                for _ in range(2):
                    actors.collect()
        finally:
            killer.join(10)
        assert len(killed) == 2, f"the killer thread killed only {killed}"
        assert actors.restarts_per_actor == [2]
    finally:
        actors.close()
    assert actor_pids(os.getpid()) == []


def test_an_actor_process_found_dead_by_collect_queued_is_replaced_at_collect():
    """The learner has taken an unroll (`collect`) and asks for those
    queued behind it: a dead worker found there is not raised (the unroll
    taken would be lost with the call); the next `collect` replaces it, and
    the new worker acts with the current weights."""
    weights, actors = _one_process_actor()
    try:
        actors.set_weights(weights, 3)
        actors.collect()
        actors._poll([0], block=True)  # Its next unroll, asked for at once.
        assert int(actors.collect_queued()["policy_version"]) == 3
        process = actors._processes[0]
        os.kill(process.pid, signal.SIGKILL)
        process.join(60)
        queued = actors.collect_queued()
        if queued is not None:
            # Sent before the kill (asked for by the collect): delivered.
            assert int(queued["policy_version"]) == 3
            queued = actors.collect_queued()
        assert queued is None
        assert actors.collect_queued() is None  # Left for collect.
        assert actors.restarts_per_actor == [0]
        actors.set_weights(weights, 4)
        assert int(actors.collect()["policy_version"]) == 4
        assert actors.restarts_per_actor == [1]
    finally:
        actors.close()
    assert actor_pids(os.getpid()) == []


# 45 s alone, 142 s beside other tests on the loaded 2-core machine: `slow`
# (the process backend's restart tests run by default).
@pytest.mark.slow
def test_a_killed_ray_actor_is_replaced():
    """`ray.kill` on one of two Ray actors: the next collects replace it
    with one acting with the current weights; both give unrolls again."""
    config = Config(num_envs=2, unroll_length=4, jit_compile=False,
                    backend="ray", num_actors=2)
    weights = _weights(config)
    actors = backends.make_actors(config)
    try:
        actors.set_weights(weights, 1)
        actors.collect()
        actors._ray.kill(actors._actors[0])
        actors.set_weights(weights, 2)
        before = list(actors.unrolls_per_actor)
        deadline = time.time() + 180
        while (actors.unrolls_per_actor[0] == before[0]
               and time.time() < deadline):
            unroll = actors.collect()
        assert actors.restarts_per_actor == [1, 0]
        assert actors.unrolls_per_actor[0] > before[0]
        assert int(unroll["policy_version"]) == 2
    finally:
        actors.close()


def test_a_worker_that_could_not_start_does_not_break_stopping_the_others(monkeypatch):
    """If starting a worker process fails while `ProcessActors` starts them
    (the OS refuses a process, a script without a main guard under the spawn
    method), the constructor raises that error, and stopping the workers
    already started (`close`, or the finalizer at exit) skips the slot
    that has none instead of failing on it: the started worker still ends."""
    config = Config(backend="process", num_actors=2, num_envs=2, unroll_length=3,
                    total_env_steps=60)
    start = backends.ProcessActors._start

    def start_only_the_first(self, index, start_update):
        if index == 1:
            raise OSError("cannot start another process")
        start(self, index, start_update)

    monkeypatch.setattr(backends.ProcessActors, "_start", start_only_the_first)
    with pytest.raises(OSError, match="cannot start another process") as raised:
        backends.ProcessActors(config)
    actors = next(entry.frame.f_locals["self"] for entry in raised.traceback
                  if isinstance(entry.frame.f_locals.get("self"), backends.ProcessActors))
    started = actors._processes[0]
    actors.close()  # Raised AttributeError on the empty slot before.
    assert not started.is_alive()
