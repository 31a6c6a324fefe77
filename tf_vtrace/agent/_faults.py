"""What a failed run says: one line naming the failing part, and its exit
status.

`train` stops on an error after writing what it can (the newest complete
checkpoint, the policy, ``summary.json``) and says what it kept
(`set_kept`); `describe` turns the error into the command line's one
``error: …`` line and exit status. The failing part is named by the error
itself where it says it (a run directory in use, an actor that failed, the
learner's non-finite updates), else by where it was raised: the
environment, the actors, the learner, the evaluation, or the writing of an
output (a full disk, a missing permission).
"""

import errno
import os
import re
import sysconfig
import traceback

__all__ = ["actor_failure", "describe", "exception_line", "failing_part",
           "hung", "set_kept", "stopping_line"]

# Exit statuses: a run directory that cannot be used (nothing done), a run
# that stopped on an error, one stopped at once by a second signal (the
# shell's 128 + SIGINT).
STATUS_RUN_DIRECTORY, STATUS_FAILED, STATUS_INTERRUPTED = 2, 1, 130

_AGENT = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(_AGENT)

# tf_vtrace's modules (file names) → the part a failure in them is of.
_PARTS = {"actor.py": "the actors", "backends.py": "the actors",
          "backends": "the actors",
          "envs.py": "the environment", "learner.py": "the learner",
          "evaluate.py": "the evaluation", "recording.py": "the records",
          "_run_dir.py": "the checkpoint", "export.py": "the policy export"}


def exception_line(error):
    """``Type: first line of the message`` of `error` (a TensorFlow op's
    ``{{function_node …}}`` prefix left out)."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(error))
    text = text.strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def failing_part(error):
    """The part of the run `error` was raised in, from its traceback: the
    environment where a frame outside tf_vtrace (and outside TensorFlow,
    NumPy and the standard library) lies below the actor's, else the
    innermost tf_vtrace module's part (None if none is known)."""
    part = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(_PACKAGE + os.sep):
            relative = os.path.relpath(path, _AGENT)
            part = _PARTS.get(relative.split(os.sep)[0], part)
        elif part == "the actors" and _is_env_code(path):
            return "the environment"
    return part


_STDLIB = sysconfig.get_paths()["stdlib"]
_NOT_ENVS = ("tensorflow", "keras", "numpy", "ray")


def _is_env_code(path):
    """Whether `path` is an environment's code (gymnasium's, an installed
    env package's or a user's), not TensorFlow's, NumPy's, Ray's or the
    standard library's."""
    parts = path.split(os.sep)
    if "gymnasium" in parts:
        return True
    stdlib = path.startswith(_STDLIB) and "site-packages" not in parts
    return not (stdlib or path.startswith("<")
                or any(name in parts for name in _NOT_ENVS))


def actor_failure(error):
    """The `ActorFailure` of an actor's `collect` that raised `error` (the
    synchronous actor acts in it), naming the part that raised."""
    from tf_vtrace.agent.backends import ActorFailure
    failure = ActorFailure(f"the actor raised {exception_line(error)}")
    failure.part = failing_part(error) or "the actors"
    return failure


def hung(error, signal_name, timeout_s):
    """The `ActorFailure` of a stopping loop that still waited for an
    unroll `timeout_s` after `signal_name` (`error`: how its wait ended, an
    interrupt or the actors' own deadline)."""
    from tf_vtrace.agent.backends import ActorFailure
    failure = ActorFailure(
        f"no unroll came within {timeout_s:g} s of {signal_name} (a hung "
        "environment?); the run stopped without it")
    failure.part = failing_part(error) or "the actors"
    return failure


def stopping_line(error):
    """The progress line of a run stopping on `error`."""
    return (f"stopped by an error ({exception_line(error)}): writing the "
            "curve, a checkpoint, the policy and the summary")


def set_kept(error, text):
    """Notes on `error` what the failed run left in its directory (its
    exit status, where not `STATUS_FAILED`, is ``tf_vtrace_exit_status``)."""
    error.tf_vtrace_kept = text


def describe(error):
    """`(line, exit status)`: the one ``error: …`` line `error` ends a
    ``train`` command with, and its exit status.

    The part named is the error's ``part`` attribute where it has one, else
    where it was raised (`failing_part`); an error of a write (`OSError`,
    TensorFlow's on a full disk) names the writing of that part.
    """
    from tf_vtrace.agent._run_dir import RunDirectoryError
    from tf_vtrace.agent.backends import ActorFailure
    if isinstance(error, KeyboardInterrupt):
        return ("error: stopped at once by a second signal (what was being "
                "written then may be missing; the newest complete checkpoint "
                "is kept)", STATUS_INTERRUPTED)
    if isinstance(error, RunDirectoryError):
        return f"error: {_one_line(str(error))}", STATUS_RUN_DIRECTORY
    own_part = getattr(error, "part", None)
    part = own_part or failing_part(error)
    if _is_write_error(error):
        part = f"writing {part or 'an output'}"
    if own_part is not None or isinstance(error, ActorFailure):
        message = _one_line(str(error))  # It says what failed, and how.
    else:
        message = exception_line(error)
    line = f"error: {part}: {message}" if part else f"error: {message}"
    kept = getattr(error, "tf_vtrace_kept", None)
    return ((f"{line} ({kept})" if kept else line),
            getattr(error, "tf_vtrace_exit_status", STATUS_FAILED))


# The errnos of a write that the disk or the file system refused.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES,
                 errno.EPERM, errno.EIO, errno.EFBIG}


def _is_write_error(error):
    """An error of a write: a full disk, a read-only or failing file
    system, a missing permission (`OSError`, or TensorFlow's own errors
    for them: ResourceExhaustedError from SaveV2 on a full disk)."""
    if isinstance(error, OSError):
        return error.errno in _WRITE_ERRNOS
    return type(error).__name__ in ("ResourceExhaustedError",
                                    "PermissionDeniedError")


def _one_line(text):
    """`text` (a message, maybe with a traceback in it) as one line: its
    first line, and where a traceback follows, the exception it ends with."""
    lines = [line.strip() for line in str(text).strip().splitlines()
             if line.strip()]
    if not lines:
        return ""
    if "Traceback (most recent call last):" in lines:
        head = lines[:lines.index("Traceback (most recent call last):")]
        return " ".join(head + [lines[-1]])
    return " ".join(lines)
