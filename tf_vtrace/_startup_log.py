"""TensorFlow's start-up log lines, held to ``TF_CPP_MIN_LOG_LEVEL``.

TensorFlow 2.21 logs through absl before its own logging has read
``TF_CPP_MIN_LOG_LEVEL``, so ``import tensorflow`` writes its info lines
(oneDNN is on, no CUDA driver) and absl's "All log messages before
absl::InitializeLog()" banner to the process's stderr at every level, twice
(two of its shared libraries start their logging; tensorflow/tensorflow#100442).
Every worker process of the agent adds its own six lines.

`import_tensorflow` applies the level to those lines, as TensorFlow
documents it (1: no INFO, 2: no WARNING either, 3: no ERROR either; FATAL
always shows). It acts only when the variable asks for it, or under
``python -m tf_vtrace...`` (the agent's command line), where it first sets
the variable's default before TensorFlow reads it (`default_level`): 2, or
3 on a Linux machine with no NVIDIA device, where TensorFlow's GPU build
logs an ERROR line, "failed call to cuInit", when its runtime starts (after
the import). Worker processes inherit the variable. And it acts only
while TensorFlow is first imported: stderr (file descriptor 2) then goes
through a pipe, and a thread passes on every line but the ones below the
level. Anything else written meanwhile (Python warnings, a traceback)
passes unchanged, as it is written (a crash inside the import itself can
lose the lines not yet passed on when the process dies).
"""

import contextlib
import os
import re
import sys
import threading

# absl's format ("I1204 20:22:01.926246   19248 port.cc:153] ...") and TSL's
# ("2025-09-17 14:44:05.157831: I external/...").
_LOG_LINE = re.compile(
    rb"^(?:(?P<absl>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
    rb"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<tsl>[IWEF]) )")
_ABSL_BANNER = (b"WARNING: All log messages before absl::InitializeLog() is "
                b"called are written to STDERR")
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_JOIN_TIMEOUT_S = 10.


def runs_our_command_line(orig_argv=None):
    """Whether Python was started as ``python -m tf_vtrace...``."""
    argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    return any(flag == "-m" and module.split(".")[0] == "tf_vtrace"
               for flag, module in zip(argv, argv[1:]))


# Device files of an NVIDIA driver (Linux; /dev/dxg: WSL 2's GPU).
_NVIDIA_DEVICES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def default_level(platform=sys.platform, exists=os.path.exists):
    """``TF_CPP_MIN_LOG_LEVEL``'s default under our command line: 3 on Linux
    without an NVIDIA device (no cuInit ERROR line), else 2."""
    if platform.startswith("linux") and not any(map(exists, _NVIDIA_DEVICES)):
        return 3
    return 2


def defers_tensorflow():
    """Whether TensorFlow waits for our command line to import it
    (``python -m tf_vtrace...``: ``--help`` answers without it)."""
    return runs_our_command_line()


def min_log_level(environ=os.environ):
    """``TF_CPP_MIN_LOG_LEVEL`` as TensorFlow reads it (0 when unset or not
    a number)."""
    try:
        return int(environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


def keeps(line, level):
    """Whether the stderr `line` (bytes) shows at `level`."""
    if level < 1:
        return True
    if line.rstrip(b"\r\n") == _ABSL_BANNER:
        return False
    match = _LOG_LINE.match(line)
    if match is None:
        return True
    severity = _SEVERITY[match.group("absl") or match.group("tsl")]
    return severity == _SEVERITY[b"F"] or severity >= level


def _forward(read_fd, write_fd, level):
    with os.fdopen(read_fd, "rb", buffering=0) as lines:
        for line in iter(lines.readline, b""):
            if keeps(line, level):
                os.write(write_fd, line)


@contextlib.contextmanager
def filtered_stderr(level):
    """Within the block, the lines written to file descriptor 2 below
    `level` are dropped (`keeps`); the rest pass on as they are written."""
    if level < 1:
        yield
        return
    try:
        saved_fd = os.dup(2)
    except OSError:  # No stderr to filter (closed).
        yield
        return
    read_fd, write_fd = os.pipe()
    thread = threading.Thread(target=_forward, args=(read_fd, saved_fd, level),
                              name="tf_vtrace-stderr-filter", daemon=True)
    thread.start()
    _flush_python_stderr()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        yield
    finally:
        _flush_python_stderr()
        os.dup2(saved_fd, 2)  # Closes the pipe's last write end: EOF.
        thread.join(_JOIN_TIMEOUT_S)
        if not thread.is_alive():  # Else it still writes there: leave it open.
            os.close(saved_fd)


def _flush_python_stderr():
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass  # None, closed or replaced: nothing buffered for fd 2.


def import_tensorflow():
    """Imports TensorFlow, its start-up lines held to the level asked for."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    if runs_our_command_line():  # Its default, set before TensorFlow reads it.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", str(default_level()))
    with filtered_stderr(min_log_level()):
        import tensorflow
    return tensorflow
