"""Shared pytest set-up: quiet TensorFlow, the `slow` marker and its switch."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The float64 reference lives beside the tests; make it importable by name.
sys.path.insert(0, os.path.dirname(__file__))

import pytest


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="run the full learning runs marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip_slow = pytest.mark.skip(reason="slow learning run: use --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
