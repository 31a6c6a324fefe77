"""The Keras examples run and do what they claim."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(script, *args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    return result.stdout


@pytest.mark.slow
def test_keras_fit_example_solves_cartpole():
    """The full run: greedy evaluation >= 475 within 500k env steps."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import keras_fit
        result = keras_fit.main(keras_fit.Args(seed=0))
    finally:
        sys.path.remove(str(ROOT / "examples"))
    assert result["env_steps"] <= 500_000 and result["unused_unrolls"] == 0
    assert result["greedy_return"] >= 475, result


def test_keras_fit_example_smoke(tmp_path):
    """The bounded version `make test` runs: the actor thread, fit, the
    callbacks and TensorBoard's event file, 2 epochs of 3 updates."""
    out = _run("keras_fit.py", "--smoke", "--logdir", str(tmp_path))
    assert "greedy return over 4 new episodes of the best epoch's weights" in out, out
    assert "after 1920 env steps" in out, out  # 6 updates × 16 envs × T = 20
    import tensorflow as tf
    tags = set()
    for path in (tmp_path / "train").glob("events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            tags.update(value.tag for value in event.summary.value)
    # The loss, an impala metric, the actor's statistics, the curve.
    for tag in ("epoch_loss", "epoch_mean_rho", "epoch_policy_lag",
                "epoch_episode_return", "epoch_greedy_return"):
        assert tag in tags, sorted(tags)


@pytest.mark.slow  # tests/test_export.py checks the same in one process fewer
def test_export_example_reloads_identically(tmp_path):
    out = _run("export_savedmodel.py", str(tmp_path / "export"))
    assert "fresh process| = 0.0" in out, out
