"""Faults a long run survives: non-finite updates are skipped (the weights,
Adam's moments and its step counter untouched) and stop the run after too
many in a row, with the checkpoint, policy and summary still written; a run
resumes from its newest checkpoint that restores, never from a broken one;
a changed config is refused; a broken policy directory is named.

NaN rewards come from a real CartPole wrapped to return NaN on some steps,
registered with gymnasium here (the local backend: the env lives in this
process)."""
import glob
import json
import math
import os
import pathlib
import subprocess
import sys

import backlog
import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf
from tolerances import SUBPROCESS_TIMEOUT_S

from tf_vtrace.agent import _run_dir, envs, recording
from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import evaluate as evaluate_lib
from tf_vtrace.agent import learner as learner_lib
from tf_vtrace.agent import train as train_lib
from tf_vtrace.agent.config import Config

# Each env instance returns NaN rewards on its steps 20 … 39 (counted over
# resets): with unroll length 10, updates 3 and 4 of a run.
NAN_ENV_ID = "tf_vtrace_test/CartPoleNaNReward-v0"
NAN_STEPS = range(20, 40)


class NaNRewards(gym.Wrapper):
    """CartPole whose reward is NaN on the steps in `NAN_STEPS`."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        reward = float("nan") if self.steps in NAN_STEPS else reward
        self.steps += 1
        return observation, reward, terminated, truncated, info


if NAN_ENV_ID not in gym.registry:
    gym.register(NAN_ENV_ID, max_episode_steps=500,
                 entry_point=lambda **kw: NaNRewards(
                     gym.make("CartPole-v1", **kw).unwrapped))

TINY = dict(env_id=NAN_ENV_ID, num_envs=2, unroll_length=10, jit_compile=False)


def _tensorboard_scalars(out, tag):
    """{step: value} of scalar `tag` in the run's TensorBoard events."""
    values = {}
    for path in glob.glob(str(pathlib.Path(out) / "tensorboard" / "events.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


# Each optimizer's slots per weight: RMSProp's v, Adam's m and v.
SLOTS = {"rmsprop": 1, "adam": 2}


@pytest.mark.parametrize("jit_compile, optimizer", [
    (False, "rmsprop"), (True, "rmsprop"), (True, "adam")])
def test_a_nan_reward_update_changes_nothing(jit_compile, optimizer):
    """The third unroll has NaN rewards: its update is skipped inside the
    compiled step; every optimizer variable (its slots, the step counter)
    and every weight is bit for bit what it was; the next finite unroll is
    applied again."""
    config = Config(**dict(TINY, jit_compile=jit_compile, optimizer=optimizer))
    actor = actor_lib.LocalActor(config)
    observation_space, _ = envs.env_spaces(NAN_ENV_ID)
    learner = learner_lib.Learner(config, observation_space, actor.head_sizes)
    actor.set_weights(learner.get_weights(), 0)
    for _ in range(2):
        assert learner.step(actor.collect())["update_skipped"] == 0
    before = [v.numpy().copy() for v in learner.optimizer.variables]
    weights = learner.get_weights()
    unroll = actor.collect()
    assert np.isnan(unroll["rewards"]).any()
    update = learner.update(unroll)  # (the loop's call: version, weights)
    diagnostics = update.diagnostics
    assert diagnostics["update_skipped"] == 1 and math.isnan(diagnostics["loss"])
    assert learner.version == update.version == 2
    after = learner.optimizer.variables
    assert len(before) == len(after) == 1 + SLOTS[optimizer] * len(weights)
    for old, new in zip(before, after):
        np.testing.assert_array_equal(old, new.numpy())
    for old, new, pushed in zip(weights, learner.get_weights(), update.weights):
        np.testing.assert_array_equal(old, new)
        np.testing.assert_array_equal(old, pushed)
    actor.collect()  # env steps 30 … 39: NaN too
    finite = actor.collect()
    assert np.isfinite(finite["rewards"]).all()
    update = learner.update(finite)
    assert update.diagnostics["update_skipped"] == 0
    assert learner.version == update.version == 3
    assert not np.array_equal(update.weights[0], weights[0])
    for pushed, keras_weight in zip(update.weights, learner.model.get_weights()):
        np.testing.assert_array_equal(pushed, keras_weight)
    actor.close()


def test_skipped_updates_are_counted_and_the_run_goes_on(tmp_path):
    """Two NaN updates in a row, fewer than the limit: the run finishes with
    10 − 2 learner updates, counts them in summary.json and TensorBoard
    (written after updates 1 and 10)."""
    config = Config(**TINY, total_env_steps=10 * 20, max_nonfinite_updates=3)
    summary = train_lib.train(config, str(tmp_path), progress=False)
    assert summary["env_steps"] == 200 and summary["learner_updates"] == 8
    assert summary["skipped_updates"] == 2 and summary["error"] is None
    skipped = _tensorboard_scalars(tmp_path, "learner/skipped_updates")
    assert skipped == {20: 0., 200: 2.}
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["skipped_updates"] == 2 and written["learner_updates"] == 8


@pytest.mark.parametrize("per_call, limit", [(1, 3), (2, 2)])
def test_an_absurd_learning_rate_stops_the_run_and_names_the_diagnostics(
        tmp_path, monkeypatch, per_call, limit):
    """Learning rate 1e30: the first update sends the weights to ~1e30, every
    later loss is non-finite; the `limit`-th skipped update in a row stops
    the run with an error naming what went non-finite, after writing the
    checkpoint, the policy and summary.json; the weights stay finite.

    One update per call: it stops after updates 1 (applied), 2, 3, 4.
    Two per call, an unroll always queued: the calls are 1-2, 3-4; the
    third is the second skipped in a row, and the fourth, in the same
    call, is booked before the run stops: 3 skipped either way."""
    config = Config(num_envs=2, unroll_length=10, jit_compile=False,
                    learning_rate=1e30, total_env_steps=50 * 20,
                    max_nonfinite_updates=limit, updates_per_call=per_call)
    if per_call > 1:
        config = config.replace(backend="local")
        backlog.use_always_queued(monkeypatch)
    with pytest.raises(train_lib.NonFiniteUpdates,
                       match=rf"^{limit} learner updates in a row .*non-finite .*loss"):
        train_lib.train(config, str(tmp_path), progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["learner_updates"] == 1 and summary["skipped_updates"] == 3
    assert summary["env_steps"] == 4 * 20
    assert f"Config.max_nonfinite_updates={limit}" in summary["error"]
    assert summary["updates_per_learner_call"] == per_call
    assert (tmp_path / "policy" / "saved_model.pb").exists()
    reader = tf.train.load_checkpoint(str(tmp_path / "checkpoints"))
    # Keras 3 checkpoints the weights under the optimizer's
    # _trainable_variables (and Adam's moments beside them).
    tensors = {name: reader.get_tensor(name)
               for name in reader.get_variable_to_shape_map()
               if name.startswith("optimizer/")}
    assert all(np.isfinite(t).all() for t in tensors.values()), tensors.keys()
    weights = [t for name, t in tensors.items() if "_trainable_variables" in name]
    assert weights and max(np.abs(w).max() for w in weights) > 1e20  # blown up


# --- Resume and checkpoints you can trust ------------------------------------

# The synchronous loop: its policy lags (2 here) are the same on every run.
RESUMABLE = Config(num_envs=2, unroll_length=8, total_env_steps=16 * 12,
                   checkpoint_every=4, policy_lag=2, jit_compile=False,
                   backend="local")


def _scalar_steps(out, tag):
    """The env steps of every `tag` event, duplicates kept, in order."""
    steps = []
    for path in sorted(glob.glob(str(pathlib.Path(out) / "tensorboard" / "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            steps += [event.step for value in event.summary.value
                      if value.tag == tag]
    return steps


def _episode_steps(out):
    steps, _ = recording.read_episodes(str(pathlib.Path(out) / "episodes.csv"))
    return steps


def test_a_corrupted_checkpoint_is_never_restored(tmp_path):
    """A finished run's newest checkpoint (update 12) gets a few bytes
    overwritten: running `train` again restores update 8 instead (the
    broken one is moved aside, not deleted), redoes updates 9 to 12, and
    ends with the same updates, env steps, policy-lag counts and TensorBoard
    events (update 10's, written before, is dropped and written again) as
    the run had; episodes.csv is cut at update 8's env step and continues
    from there. With every checkpoint broken the error names each."""
    first = train_lib.train(RESUMABLE, str(tmp_path), progress=False)
    checkpoints = tmp_path / "checkpoints"
    data = checkpoints / "ckpt-12.data-00000-of-00001"
    with open(data, "r+b") as handle:
        handle.seek(data.stat().st_size // 2)
        handle.write(b"\xff" * 8)
    summary = train_lib.train(RESUMABLE, str(tmp_path), progress=False)
    assert summary["resumed_at_update"] == 8
    assert (checkpoints / "broken" / data.name).exists()
    for key in ("learner_updates", "env_steps", "policy_lag_counts"):
        assert summary[key] == first[key], key
    assert sum(summary["unrolls_per_actor"]) == 12
    assert _scalar_steps(tmp_path, "learner/loss") == [16, 160]
    steps = _episode_steps(tmp_path)
    assert (np.diff(steps) >= 0).all() and steps.max() <= 192
    assert (steps <= 128).any() and (steps > 128).any()
    # Truncated index of the newest, garbage in the data of the other.
    (checkpoints / "ckpt-12.index").write_bytes(
        (checkpoints / "ckpt-12.index").read_bytes()[:20])
    (checkpoints / "ckpt-8.data-00000-of-00001").write_bytes(b"\0" * 64)
    with pytest.raises(train_lib.RunDirectoryError,
                       match=r"no usable checkpoint.*ckpt-12.*ckpt-8.*--restart"):
        train_lib.train(RESUMABLE, str(tmp_path), progress=False)


def test_a_changed_config_is_refused_and_restart_starts_over(tmp_path):
    out = str(tmp_path)
    train_lib.train(RESUMABLE.replace(total_env_steps=32), out, progress=False)
    with pytest.raises(train_lib.RunDirectoryError,
                       match=r"differing fields: seed: 0 there, 3 now; "
                             r"total_env_steps: 32 there, 192 now"):
        train_lib.train(RESUMABLE.replace(seed=3), out, progress=False)
    assert json.loads((tmp_path / "summary.json").read_text())["env_steps"] == 32
    (tmp_path / "notes.txt").write_text("mine")
    summary = train_lib.train(RESUMABLE, out, progress=False, restart=True)
    assert summary["resumed_at_update"] is None and summary["env_steps"] == 192
    assert (tmp_path / "notes.txt").read_text() == "mine"  # not a run output
    assert _scalar_steps(tmp_path, "learner/loss") == [16, 160]


def test_a_run_written_before_a_field_existed_is_the_same_run(tmp_path):
    """A config.json without the fields added since (queue_size,
    vector_env, optimizer) matches a config with the values that behave as
    the code did then (a queue of 1, gymnasium's vector env, Adam), not a
    default that changed since (a deeper queue, vector_env "auto", RMSProp),
    which is named;
    a value other than the default is named too."""
    config = Config(backend="local", num_envs=2, jit_compile=False,
                    vector_env="gymnasium", optimizer="adam", queue_size=1)
    old = config.to_dict()
    del old["queue_size"], old["vector_env"], old["optimizer"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    _run_dir._check_same_config(config, str(tmp_path / "config.json"))
    with pytest.raises(train_lib.RunDirectoryError,
                       match="vector_env: 'gymnasium' there, 'auto' now"):
        _run_dir._check_same_config(config.replace(vector_env="auto"),
                                    str(tmp_path / "config.json"))
    with pytest.raises(train_lib.RunDirectoryError,
                       match="optimizer: 'adam' there, 'rmsprop' now"):
        _run_dir._check_same_config(config.replace(optimizer="rmsprop"),
                                    str(tmp_path / "config.json"))
    with pytest.raises(train_lib.RunDirectoryError,
                       match="queue_size: 1 there, 2 now"):
        _run_dir._check_same_config(config.replace(queue_size=2),
                                    str(tmp_path / "config.json"))


@pytest.mark.parametrize("text, reason", [
    ("{not json", r"Expecting property name"), ("[1, 2]", r"a JSON list, not an object"),
    (b"\xff\xfe", r"codec can't decode")])
def test_an_unreadable_config_json_is_named_and_restart_replaces_it(tmp_path, text,
                                                                    reason):
    path = tmp_path / "config.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(train_lib.RunDirectoryError,
                       match=rf"{path} is not a readable run config \(.*{reason}.*\); "
                             r"pass --restart"):
        train_lib.train(RESUMABLE, str(tmp_path), progress=False)
    summary = train_lib.train(RESUMABLE.replace(total_env_steps=32), str(tmp_path),
                              progress=False, restart=True)
    assert summary["env_steps"] == 32
    assert json.loads(path.read_text())["total_env_steps"] == 32


def test_a_run_directory_that_cannot_be_written_is_named(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    for out, reason in [(a_file, "File exists"), (a_file / "run", "Not a directory")]:
        for restart in (False, True):
            with pytest.raises(train_lib.RunDirectoryError,
                               match=rf"{out}: cannot write a run there \({reason}"):
                train_lib.train(RESUMABLE, str(out), progress=False, restart=restart)
    assert a_file.read_text() == "mine"


@pytest.mark.parametrize("episodes", [0, -2, 2.0, True, None])
def test_evaluate_refuses_a_bad_episode_count_before_loading(tmp_path, episodes):
    # The policy path does not exist: the count is checked first.
    with pytest.raises(ValueError, match=r"`episodes` must be an integer >= 1"):
        evaluate_lib.evaluate(str(tmp_path / "nothing"), episodes=episodes)
    with pytest.raises(ValueError, match=r"`episodes` must be an integer >= 1"):
        evaluate_lib.play_episodes(None, "CartPole-v1", episodes)


def test_evaluate_names_a_missing_or_broken_policy(tmp_path):
    with pytest.raises(evaluate_lib.PolicyError,
                       match=rf"{tmp_path}/nothing: no such policy directory"):
        evaluate_lib.evaluate(str(tmp_path / "nothing"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"not a protobuf")
    with pytest.raises(evaluate_lib.PolicyError,
                       match=rf"{broken}: not a readable policy"):
        evaluate_lib.evaluate(str(broken))


def test_cli_evaluate_on_a_missing_policy_is_one_clear_line(tmp_path):
    missing = tmp_path / "run" / "policy"
    result = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "evaluate", str(missing)],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 2, result.stderr
    assert f"error: {missing}: no such policy directory" in result.stderr
    assert "Traceback" not in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "evaluate", str(missing),
         "--episodes", "0"],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 2, result.stderr
    assert "argument --episodes: must be an integer >= 1, got '0'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_corrupt_csv_row_is_left_out_and_the_file_kept_beside(tmp_path):
    path = tmp_path / "episodes.csv"
    original = (b"env_steps,return,length\n320,12.0,12\ngar\x00bage\xff,1,2\n"
                b"320,13.0,13\n960,9.0,9\n1280,1")
    path.write_bytes(original)
    kept = recording._truncate_csv(str(path), recording.EPISODES_HEADER, 640)
    assert kept == [["320", "12.0", "12"], ["320", "13.0", "13"]]
    assert path.read_text().splitlines() == [
        "env_steps,return,length", "320,12.0,12", "320,13.0,13"]
    assert (tmp_path / "episodes.csv.unreadable").read_bytes() == original
    # Only a cut-off last line (a killed process): nothing kept beside.
    path.write_bytes(b"env_steps,return,length\n320,12.0,12\n640,1")
    (tmp_path / "episodes.csv.unreadable").unlink()
    assert recording._truncate_csv(str(path), recording.EPISODES_HEADER, 640) == [
        ["320", "12.0", "12"]]
    assert not (tmp_path / "episodes.csv.unreadable").exists()
