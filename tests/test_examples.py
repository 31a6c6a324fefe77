"""The docstring examples and the demo script run and say what they claim."""
import doctest
import importlib
import os
import pkgutil
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
