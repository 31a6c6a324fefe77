"""The docstring examples and the demo script run and say what they claim."""
import doctest
import importlib
import os
import pkgutil
import re
import subprocess
import sys

import pytest
from tolerances import SUBPROCESS_TIMEOUT_S

import tf_vtrace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# tf_vtrace.tf_agents needs TF-Agents under TF_USE_LEGACY_KERAS=1, a process-wide
# setting: its doctests run in tests/tf_agents_suite.py, in a process of its own.
OWN_PROCESS_MODULES = {"tf_vtrace.tf_agents"}
MODULES = sorted(m.name for m in pkgutil.iter_modules(tf_vtrace.__path__,
                                                      "tf_vtrace.")
                 if m.name not in OWN_PROCESS_MODULES)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_demo_computes_targets_on_cartpole():
    completed = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "vtrace_targets.py")],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "importance ratios ρ" in completed.stdout
    assert "mean vs_t" in completed.stdout


def test_own_env_example_trains_its_corridor_from_python(tmp_path):
    """examples/own_env.py registers Corridor-v0 and trains on it: a few
    thousand env steps already beat a random walk (mean return ≈ −0.87 over
    2,000 episodes; the best is 0.75)."""
    completed = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "own_env.py"), "5000"],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert completed.returncode == 0, completed.stderr[-2000:]
    line = completed.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"(\d+) env steps: mean return of the last episodes "
                         r"(\S+) \(best 0.75\)", line)
    assert match and int(match.group(1)) >= 5000, line
    assert float(match.group(2)) > 0, line
    assert (tmp_path / "runs" / "corridor" / "policy" / "saved_model.pb").exists()
