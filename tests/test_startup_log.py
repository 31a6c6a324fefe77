"""TensorFlow's start-up log lines held to TF_CPP_MIN_LOG_LEVEL
(tf_vtrace/_startup_log.py): the filter line by line, the file descriptor
it swaps, and real imports in fresh processes."""
import os
import re
import subprocess
import sys

import pytest
from tolerances import SUBPROCESS_TIMEOUT_S

from tf_vtrace import _startup_log

# Lines TensorFlow 2.21 wrote here at `import tensorflow`, and made-up ones
# of the other severities in both of its formats.
ABSL = b"%s0000 00:00:1796588521.926246   19248 port.cc:153] oneDNN custom operations are on.\n"
TSL = b"2025-09-17 14:44:05.157831: %s external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] x\n"
BANNER = (b"WARNING: All log messages before absl::InitializeLog() is called are "
          b"written to STDERR\n")
SEVERITIES = b"IWEF"
# A log line prefix, as the subprocess checks look for it in the output.
LOG_LINE = re.compile(r"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
                      r"|\d{4}-\d\d-\d\d [\d:.]+: [IWEF] )", re.M)


@pytest.mark.parametrize("template", [ABSL, TSL], ids=["absl", "tsl"])
@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_a_log_line_shows_from_its_severity_up_and_fatal_always(template, level):
    for severity_index, severity in enumerate(SEVERITIES):
        line = template % bytes([severity])
        expected = severity_index >= level or severity == ord("F")
        assert _startup_log.keeps(line, level) is expected, (line, level)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_other_lines_always_show_and_the_banner_from_level_1(level):
    for line in [b"Traceback (most recent call last):\n", b"UserWarning: x\n",
                 b"I said so\n", b"E0000 not a log line\n", b"", b"partial"]:
        assert _startup_log.keeps(line, level)
    assert _startup_log.keeps(BANNER, level) is (level == 0)


@pytest.mark.parametrize("value, level", [(None, 0), ("0", 0), ("2", 2), ("3", 3),
                                          ("two", 0), ("", 0)])
def test_the_level_is_read_as_tensorflow_reads_it(value, level):
    environ = {} if value is None else {"TF_CPP_MIN_LOG_LEVEL": value}
    assert _startup_log.min_log_level(environ) == level


@pytest.mark.parametrize("argv, ours", [
    (["python", "-m", "tf_vtrace.agent", "train"], True),
    (["python", "-X", "dev", "-m", "tf_vtrace.agent"], True),
    (["python", "-m", "tf_vtrace_other"], False),
    (["python", "-m", "pytest", "tf_vtrace"], False),
    (["python", "train.py", "-m", "x"], False),
    (["python"], False),
])
def test_our_command_line_is_recognized_by_its_module(argv, ours):
    assert _startup_log.runs_our_command_line(argv) is ours


FD_PROGRAM = r"""
import os, sys
from tf_vtrace import _startup_log
ABSL = b"%s0000 00:00:1796588521.926246   19248 port.cc:153] message\n"
os.write(2, b"BEGIN\n")  # What the imports above wrote, if anything, is not compared.
os.write(2, b"before " + ABSL % b"I")
try:
    with _startup_log.filtered_stderr(2):
        for severity in b"IWEF":
            os.write(2, ABSL % bytes([severity]))
        print("python text", file=sys.stderr)
        os.write(2, b"raw text\n")
        raise KeyError("inside")
except KeyError:
    pass
os.write(2, b"after " + ABSL % b"I")
print("stdout", flush=True)
"""


def test_the_filter_passes_other_lines_in_order_and_restores_stderr():
    result = subprocess.run([sys.executable, "-c", FD_PROGRAM], capture_output=True,
                            timeout=SUBPROCESS_TIMEOUT_S, env=_environment(level=3))
    message = b"0000 00:00:1796588521.926246   19248 port.cc:153] message\n"
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert result.stdout == b"stdout\n"
    # The filter at level 2 drops the INFO and WARNING lines; the lines before
    # and after it (both INFO) reach stderr unfiltered. (Level 3 only keeps
    # the import of tf_vtrace quiet.)
    _, begun, after = result.stderr.partition(b"BEGIN\n")
    expected = (b"before I" + message + b"E" + message + b"F" + message
                + b"python text\nraw text\n" + b"after I" + message)
    assert begun and after == expected


def _environment(level):
    environ = {key: value for key, value in os.environ.items()
               if key != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        environ["TF_CPP_MIN_LOG_LEVEL"] = str(level)
    return environ


def _log_lines(text):
    return [line for line in text.splitlines()
            if LOG_LINE.match(line) or "absl::InitializeLog" in line]


@pytest.mark.parametrize("level", ["1", "2"])
def test_import_tf_vtrace_shows_no_info_lines_at_level_1_and_up(level):
    # TensorFlow 2.21 writes 6 INFO lines at `import tensorflow` whatever the
    # level (the module doc of tf_vtrace/_startup_log.py).
    result = subprocess.run(
        [sys.executable, "-c", "import tf_vtrace; print('OK')"], capture_output=True,
        text=True, timeout=SUBPROCESS_TIMEOUT_S, env=_environment(level))
    assert result.returncode == 0 and result.stdout == "OK\n", result.stderr[-3000:]
    assert _log_lines(result.stderr) == [], result.stderr[-3000:]


def test_the_command_line_is_quiet_without_the_variable():
    result = subprocess.run(
        [sys.executable, "-m", "tf_vtrace.agent", "evaluate", "--help"],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S,
        env=_environment(level=None))
    assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-3000:]
    assert _log_lines(result.stderr) == [], result.stderr[-3000:]
