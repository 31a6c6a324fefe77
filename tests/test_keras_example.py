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
def test_keras_fit_example_learns_cartpole():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import keras_fit
        losses, random_length, learned_length = keras_fit.main()
    finally:
        sys.path.remove(str(ROOT / "examples"))
    assert losses[-1] < 0.8 * losses[0]
    assert learned_length > 1.5 * random_length


def test_keras_fit_example_smoke():
    """The bounded version `make test` runs: the whole pipeline, two rounds."""
    out = _run("keras_fit.py", "--smoke")
    assert "V-trace loss on its unrolls" in out, out
    assert "after 2 actor-learner rounds" in out, out


@pytest.mark.slow  # tests/test_export.py checks the same in one process fewer
def test_export_example_reloads_identically(tmp_path):
    out = _run("export_savedmodel.py", str(tmp_path / "export"))
    assert "fresh process| = 0.0" in out, out
