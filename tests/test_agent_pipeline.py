"""The agent end to end: a bounded run writes every output, Ctrl-C and
SIGTERM still leave them, a SIGKILLed run resumes, the SavedModel acts in a
fresh process; the multi-discrete and Atari paths run. The full learning run
is `slow` (`make learn-full`)."""
import glob
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from process_tree import actor_pids, ignores, is_stopped
from tolerances import POLL_TIMEOUT_S, SUBPROCESS_TIMEOUT_S

from tf_vtrace.agent import envs, recording
from tf_vtrace.agent.config import Config
from tf_vtrace.agent.train import train

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _agent(*args, timeout=SUBPROCESS_TIMEOUT_S):
    result = subprocess.run([sys.executable, "-m", "tf_vtrace.agent", *args],
                            capture_output=True, text=True, timeout=timeout,
                            env=ENV)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    return result.stdout


def _assert_outputs(out, interrupted):
    out = pathlib.Path(out)
    assert glob.glob(str(out / "tensorboard" / "events.out.tfevents.*"))
    assert (out / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert glob.glob(str(out / "checkpoints" / "ckpt-*.index"))
    assert (out / "policy" / "saved_model.pb").exists()
    assert (out / "episodes.csv").read_text().startswith("env_steps,return,length")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is interrupted
    return summary


def _last_checkpoint(out):
    """The highest update number among the kept checkpoints (0: none)."""
    numbers = [int(path.rsplit("-", 1)[1].split(".")[0]) for path in
               glob.glob(str(pathlib.Path(out) / "checkpoints" / "ckpt-*.index"))]
    return max(numbers, default=0)


def _tensorboard_tags(out):
    import tensorflow as tf
    tags = set()
    for path in glob.glob(str(pathlib.Path(out) / "tensorboard" / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


# A run far longer than any test: it ends only by a signal.
_ENDLESS = ("--num-envs", "4", "--unroll-length", "16", "--checkpoint-every",
            "1", "--total-env-steps", "10000000", "--no-progress",
            "--jit-compile", "false")


def _start_training(out, *flags, own_group=False):
    """`python -m tf_vtrace.agent train --out OUT FLAGS` in a subprocess
    (faulthandler on: SIGABRT prints every thread's stack); `own_group`: in
    a process group of its own (to be signalled as a whole)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tf_vtrace.agent", "train", "--out", str(out),
         *flags],
        env=dict(ENV, PYTHONFAULTHANDLER="1"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=own_group)


def _wait_until(process, what, condition, timeout=POLL_TIMEOUT_S, tick_s=0.02):
    """Waits until `condition()` while `process` runs (`what`: for the
    failure message)."""
    deadline = time.time() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.time() < deadline, f"{what}: not within {timeout} s"
        time.sleep(tick_s)


def _wait_for_checkpoint(process, out, number):
    """Waits until checkpoint `number` (or a later one) of the running
    `process` is on disk."""
    _wait_until(process, f"checkpoint {number}",
                lambda: _last_checkpoint(out) >= number, tick_s=0.2)


def _wait_for_replacement(process, victim):
    """Waits until the actor process `victim` of `process` is gone and a
    new one stands in its place."""
    def replaced():
        pids = actor_pids(process.pid)
        return victim not in pids and len(pids) == 2
    _wait_until(process, f"actor {victim} replaced", replaced, tick_s=0.2)


def _signal_and_wait(process, signum, timeout=POLL_TIMEOUT_S, group=False):
    """Sends `signum` (to its process group: `group`); `(stdout, stderr)`
    once the process has exited."""
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    try:
        # Writing the outputs after the signal includes a SavedModel export:
        # tens of seconds on two loaded cores.
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)  # faulthandler prints every stack
        stdout, stderr = process.communicate(timeout=60)
        pytest.fail(f"no exit within {timeout} s of {signal.Signals(signum).name};"
                    f" stacks:\n" + stderr[-8000:])


def _stop_after_two_updates(out, signum):
    """`signum` to an endless run after its second checkpoint: the exit
    status is 128 + signum, every output is written; returns the summary."""
    process = _start_training(out, *_ENDLESS)
    # Wait until two updates are done (TensorBoard is written after the first).
    _wait_for_checkpoint(process, out, 2)
    stdout, stderr = _signal_and_wait(process, signum)
    assert process.returncode == 128 + signum, stdout + stderr[-4000:]
    summary = _assert_outputs(out, interrupted=True)
    assert summary["stop_signal"] == signal.Signals(signum).name
    return summary


def test_ctrl_c_leaves_curve_checkpoint_and_a_policy_that_acts(tmp_path):
    """SIGINT to a long run after its first updates: the run still writes its
    curve, a last checkpoint, the SavedModel and the summary; the SavedModel
    then plays CartPole in a fresh process."""
    out = tmp_path / "run"
    summary = _stop_after_two_updates(out, signal.SIGINT)
    assert 2 <= summary["learner_updates"] < 10000000 // 64
    assert {"episode/mean_return", "learner/rho_clipped_fraction",
            "learner/mean_rho", "learner/entropy", "learner/kl",
            "learner/policy_lag", "learner/policy_loss"} <= _tensorboard_tags(out)

    evaluation = _agent("evaluate", str(out / "policy"), "--episodes", "3")
    result = json.loads(evaluation.strip().splitlines()[-1])
    assert result["episodes"] == 3
    assert all(1 <= r <= 500 for r in result["returns"])

    # Several policies in one process; a missing one is named, the others
    # are still evaluated, and the exit status says one failed.
    missing = tmp_path / "missing"
    several = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "evaluate",
         str(out / "policy"), str(missing), str(out / "policy"),
         "--episodes", "3"],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, env=ENV)
    assert several.returncode == 2, several.stderr[-4000:]
    assert f"error: {missing}: no such policy directory" in several.stderr
    results = [json.loads(line) for line in several.stdout.splitlines()
               if line.startswith("{")]
    assert [r["policy"] for r in results] == [str(out / "policy")] * 2
    # Same seed: the same episodes as the single evaluation above.
    assert [r["returns"] for r in results] == [result["returns"]] * 2


def test_sigterm_stops_like_ctrl_c(tmp_path):
    """SIGTERM (a scheduler's preemption) to a long run: the update in
    progress finishes, then the curve, a last checkpoint, the policy and the
    summary are written, within the margin; the exit status is 128 + 15.
    (SIGTERM to a whole process group, actor processes included: below.)"""
    out = tmp_path / "run"
    summary = _stop_after_two_updates(out, signal.SIGTERM)
    assert summary["learner_updates"] >= 2
    assert _last_checkpoint(out) == summary["learner_updates"]
    # The asynchronous default: the unrolls queued or being acted at the
    # stop were learned on before the checkpoint, none dropped.
    assert summary["backend"] == "thread"
    assert sum(summary["unrolls_per_actor"]) == summary["learner_updates"]
    assert summary["discarded_unrolls"] == 0


def test_a_killed_actor_process_is_replaced_and_training_goes_on(tmp_path):
    """Two actor processes; one is SIGKILLed (the OOM killer's way) after
    checkpoint 2: a new one takes its place with the current weights, three
    more checkpoints come, and SIGTERM to the whole process group (as a
    scheduler sends it; the actors ignore it) still stops the run cleanly,
    with the restart counted in summary.json and TensorBoard."""
    out = tmp_path / "run"
    process = _start_training(out, *_ENDLESS, "--backend", "process",
                              "--num-actors", "2", own_group=True)
    try:
        _wait_for_checkpoint(process, out, 2)
        victim = actor_pids(process.pid)[0]
        os.kill(victim, signal.SIGKILL)
        # The survivor keeps the learner busy meanwhile: the death is seen
        # when the victim's pipe reads as closed, which on a loaded machine
        # (a TF process's teardown) can take several updates.
        _wait_for_replacement(process, victim)
        _wait_for_checkpoint(process, out, _last_checkpoint(out) + 3)
        assert len(actor_pids(process.pid)) == 2
        # The checkpoints may all be the survivor's: the SIGTERM below is
        # for actors that ignore it, so wait until the replacement is past
        # its imports (a worker still starting dies of it; the run is
        # stopping then, but the death would count as a second restart).
        _wait_until(process, "the actors ignore SIGTERM", lambda: all(
            ignores(pid, signal.SIGTERM) for pid in actor_pids(process.pid)))
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    stdout, stderr = _signal_and_wait(process, signal.SIGTERM, group=True)
    assert process.returncode == 143, stdout + stderr[-4000:]
    assert "failed, starting a new one" in stderr
    summary = _assert_outputs(out, interrupted=True)
    assert summary["actor_restarts"] == 1
    assert sorted(summary["restarts_per_actor"]) == [0, 1]
    # The unrolls in flight at the stop were learned on, none dropped.
    assert sum(summary["unrolls_per_actor"]) == summary["learner_updates"]
    assert summary["discarded_unrolls"] == 0
    assert "learner/actor_restarts" in _tensorboard_tags(out)


def _scalar_steps(out, tag):
    """The env steps of every `tag` event, duplicates kept."""
    import tensorflow as tf
    steps = []
    for path in glob.glob(str(pathlib.Path(out) / "tensorboard" / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            steps += [event.step for value in event.summary.value
                      if value.tag == tag]
    return sorted(steps)


def _kill_at_checkpoint(process, out, number, timeout=POLL_TIMEOUT_S,
                        slice_s=0.2):
    """SIGKILLs the running `process` once checkpoint `number` (or a later
    one) is on disk; returns the newest checkpoint then.

    The process runs only in short slices (SIGCONT, `slice_s`, SIGSTOP) and
    is looked at while stopped, so it cannot run on between the look and
    the kill, however loaded the machine: it is killed within one slice of
    checkpoint `number`, never after the end of its run (the 200 updates of
    the test below take seconds of compute, a slice at most `slice_s`)."""
    def stopped_at_checkpoint():
        process.send_signal(signal.SIGSTOP)
        _wait_until(process, "SIGSTOP takes effect",
                    lambda: is_stopped(process.pid))
        if _last_checkpoint(out) >= number:
            return True
        process.send_signal(signal.SIGCONT)
        return False
    try:
        _wait_until(process, f"checkpoint {number}", stopped_at_checkpoint,
                    timeout, tick_s=slice_s)
        return _last_checkpoint(out)
    finally:
        process.kill()
        process.communicate(timeout=60)


def test_a_killed_run_resumes_without_gap_or_overlap(tmp_path):
    """A 200-update run SIGKILLed after its checkpoint 10 (of one every 5),
    then the same command again: it resumes at the newest complete
    checkpoint and ends as an uninterrupted run does: 200 updates, 6400 env
    steps, a policy lag for each of the 200 unrolls, TensorBoard's loss
    exactly once at each env step of the schedule (updates 1, 10, 20, ...,
    200: nothing the killed process wrote after its checkpoint is left
    twice), episodes.csv in order of env steps on both sides of the resume."""
    out = tmp_path / "run"
    updates = 200
    flags = ("--num-envs", "2", "--unroll-length", "16", "--checkpoint-every",
             "5", "--total-env-steps", str(updates * 32), "--no-progress",
             "--jit-compile", "false")
    killed_at = _kill_at_checkpoint(_start_training(out, *flags), out, 10)
    assert 10 <= killed_at < updates

    stdout = _agent("train", "--out", str(out), *flags)
    assert "resuming at update" in stdout
    summary = json.loads(stdout.strip().splitlines()[-1])
    # A checkpoint being written at the kill is not restored: the previous is.
    assert summary["resumed_at_update"] in (killed_at, killed_at - 5), killed_at
    assert summary["resumed_at_update"] >= 5
    assert summary["learner_updates"] == updates
    assert summary["env_steps"] == updates * 32
    assert sum(summary["policy_lag_counts"].values()) == updates
    assert sum(summary["unrolls_per_actor"]) == updates
    assert summary["backend"] == "thread" and summary["discarded_unrolls"] == 0
    assert _scalar_steps(out, "learner/loss") == [
        32, *range(320, updates * 32 + 1, 320)]
    steps, _ = recording.read_episodes(str(out / "episodes.csv"))
    resumed_at = summary["resumed_at_update"] * 32
    assert (np.diff(steps) >= 0).all() and steps.max() <= updates * 32
    assert (steps <= resumed_at).any() and (steps > resumed_at).any()
    assert (steps % 32 == 0).all()


def test_multi_discrete_path_trains_with_two_heads(tmp_path):
    config = Config(env_id=envs.MULTI_DISCRETE_ID, num_envs=4, unroll_length=10,
                    total_env_steps=200, policy_lag=1, jit_compile=False,
                    backend="local")
    summary = train(config, str(tmp_path), progress=False)
    _assert_outputs(tmp_path, interrupted=False)
    assert summary["env_steps"] == 200
    # Local backend, lag 1: the first update learns on the initial weights'
    # unroll (lag 0), the four others on unrolls one update old.
    assert summary["backend"] == "local" and summary["unrolls_per_actor"] == [5]
    assert summary["policy_lag_counts"] == {"0": 1, "1": 4}
    assert summary["policy_lag_mean"] == 0.8 and summary["policy_lag_max"] == 1
    import tensorflow as tf
    policy = tf.saved_model.load(str(tmp_path / "policy"))
    assert policy.head_sizes.numpy().tolist() == [2, 3]
    actions = policy.act(np.zeros([5, 4], np.float32))["sampled_action"].numpy()
    assert actions.shape == (5, 2)
    assert (actions[:, 0] < 2).all() and (actions[:, 1] < 3).all()


def test_cartpole_force_env_uses_both_heads():
    env = envs.make_env(envs.MULTI_DISCRETE_ID)
    changes = []
    for force in range(3):
        start, _ = env.reset(seed=0)
        obs, *_ = env.step(np.array([1, force]))
        changes.append(obs[1] - start[1])
    env.close()
    # The cart's velocity change in one push is proportional to the force
    # (same start state, so the pole's share, under 0.5 %, is the same).
    np.testing.assert_allclose(np.array(changes) / changes[1],
                               envs.FORCE_SCALES, rtol=1e-2)


def test_atari_path_preprocesses_and_trains(tmp_path):
    pytest.importorskip("ale_py")
    observation_space, action_space = envs.env_spaces("ALE/Pong-v5")
    assert observation_space.shape == (4, 84, 84)
    assert observation_space.dtype == np.uint8
    config = Config(env_id="ALE/Pong-v5", num_envs=2, unroll_length=4,
                    total_env_steps=16, reward_clip=1.0, jit_compile=False)
    summary = train(config, str(tmp_path), progress=False)
    _assert_outputs(tmp_path, interrupted=False)
    assert summary["learner_updates"] == 2
    import tensorflow as tf
    policy = tf.saved_model.load(str(tmp_path / "policy"))
    out = policy.act(np.zeros([1, 4, 84, 84], np.float32))
    assert out["logits"].shape == (1, action_space.n)


@pytest.mark.slow
def test_full_run_learns_cartpole(tmp_path):
    """The demo's default Config: ≥ 475 over 20 greedy evaluation episodes."""
    _agent("train", "--out", str(tmp_path), "--no-progress", timeout=1200)
    result = json.loads(_agent("evaluate", str(tmp_path / "policy"))
                        .strip().splitlines()[-1])
    assert result["mean_return"] >= 475, result
