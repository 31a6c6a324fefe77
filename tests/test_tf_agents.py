"""tf_vtrace.tf_agents (TF-Agents) — every check runs in a process of its own.

TF-Agents needs `TF_USE_LEGACY_KERAS=1` set before TensorFlow is imported,
and the setting holds for the whole process, so nothing here imports
TF-Agents into the pytest process: tests/tf_agents_suite.py (feed-forward
networks) and tests/tf_agents_rnn_suite.py (recurrent ones) run under
pytest in subprocesses with the variable set, and the checks of the optional
import run small scripts in fresh interpreters.
"""
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
from tolerances import SUBPROCESS_TIMEOUT_S

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(args, legacy_keras, timeout=SUBPROCESS_TIMEOUT_S, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return subprocess.run([sys.executable, *args], env=env, capture_output=True,
                          text=True, timeout=timeout, **kwargs)


@pytest.mark.parametrize("suite", ["tf_agents_suite.py", "tf_agents_rnn_suite.py"],
                         ids=["feed_forward", "recurrent"])
def test_impala_agent_with_real_tf_agents_in_its_own_process(suite, tmp_path):
    result = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "--basetemp", str(tmp_path / "pytest"),
                   str(ROOT / "tests" / suite)],
                  legacy_keras=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-3000:]


def test_import_tf_vtrace_does_not_import_tf_agents():
    result = _run(["-c", "import sys, tf_vtrace, tf_vtrace.keras, tf_vtrace.export; "
                   "assert 'tf_agents' not in sys.modules, 'tf_agents imported'; "
                   "print('NO_TF_AGENTS')"], legacy_keras=False)
    assert result.returncode == 0 and "NO_TF_AGENTS" in result.stdout, result.stderr


# tf_agents is installed in the test venv; this blocker makes it unimportable
# for one interpreter, as on a machine without it.
WITHOUT_TF_AGENTS = textwrap.dedent("""
    import importlib.abc, sys

    class BlockTfAgents(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "tf_agents" or name.startswith("tf_agents."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, BlockTfAgents())
    import tf_vtrace  # the core works without TF-Agents
    try:
        import tf_vtrace.tf_agents
    except ImportError as error:
        print("MESSAGE:", error)
    else:
        raise SystemExit("tf_vtrace.tf_agents imported without tf_agents")
""")


def test_agents_without_tf_agents_says_what_to_install():
    result = _run(["-c", WITHOUT_TF_AGENTS], legacy_keras=False)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    message = result.stdout
    for needed in ("No module named 'tf_agents'",
                   "pip install --no-deps tf-agents==0.19.0",
                   "gym==0.23.0", "numpy<2.4", "tensorboard", "gin-config",
                   "TF_USE_LEGACY_KERAS=1 before TensorFlow is imported"):
        assert needed in message, (needed, message)


KERAS_3 = textwrap.dedent("""
    import tensorflow as tf
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import time_step as ts
    from tf_vtrace.tf_agents import ImpalaAgent
    assert not tf.keras.layers.Layer.__module__.startswith("tf_keras")
    try:
        ImpalaAgent(ts.time_step_spec(tf.TensorSpec([4])),
                    tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1),
                    None, None, None)
    except RuntimeError as error:
        print("MESSAGE:", error)
    else:
        raise SystemExit("ImpalaAgent was built under Keras 3")
""")


def test_agent_refuses_keras_3():
    result = _run(["-c", KERAS_3], legacy_keras=False)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "TF_USE_LEGACY_KERAS=1 before TensorFlow" in result.stdout, result.stdout
    assert "policy.variables() is empty" in result.stdout, result.stdout


def test_cartpole_example_smoke():
    """The bounded run `make test` does: the whole loop, a few iterations."""
    result = _run([str(ROOT / "examples" / "tf_agents_cartpole.py"), "--smoke"],
                  legacy_keras=False, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert "average return" in result.stdout, result.stdout


@pytest.mark.slow
def test_cartpole_example_learns():
    """The full run: the average return rises well above a random policy's
    (≈ 22); measured 200–350 after 48,000 steps, not monotone."""
    result = _run([str(ROOT / "examples" / "tf_agents_cartpole.py")],
                  legacy_keras=False, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    returns = [float(r) for r in re.findall(r"average return +([0-9.]+)", result.stdout)]
    assert returns[0] < 60 and max(returns) > 150, result.stdout
