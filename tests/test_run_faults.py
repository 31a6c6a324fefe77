"""A user's bad day, as real CLI runs in subprocesses: one process owns a run
directory (a second one, or ``--restart``, is refused naming the owner's
pid; a SIGKILLed owner's lock is taken over); every fault (an env that
raises under ``--sync``, an env that hangs, a full disk, an unreachable Ray)
ends in one ``error: …`` line naming the failing part, an exit status ≠ 0,
and a ``summary.json`` with the error beside the newest complete checkpoint
and the policy, nothing half-written left as the newest; a failed start
leaves nothing that blocks the corrected command; an ``episodes.csv``
edited out of order is kept aside under the name the message gives.

Runs are small (4 envs × 16 steps an update) and share directories where
one case can start where another ended. The waits are bounded
(`tolerances`); nothing is timed.
"""
import contextlib
import csv
import glob
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import faulty_env
import pytest
from tolerances import POLL_TIMEOUT_S, SUBPROCESS_TIMEOUT_S

from tf_vtrace.agent import _faults, _run_dir, backends, recording

ROOT = pathlib.Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
SMALL = ("--num-envs", "4", "--unroll-length", "16", "--no-progress",
         "--jit-compile", "false", "--hidden-sizes", "16")
# A run far longer than any test: it ends only by a signal or a fault.
ENDLESS = ("--total-env-steps", "10000000", "--checkpoint-every", "1")


def _env(tmp_path, **extra):
    """The subprocess environment: the faulty envs registered (by a
    ``sitecustomize.py``, in actor processes too)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    faulty_env.sitecustomize_dir(str(site))
    path = os.pathsep.join([str(site), str(TESTS), str(ROOT),
                            os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2",
                PYTHONFAULTHANDLER="1", **extra)


def _command(out, *flags):
    return [sys.executable, "-m", "tf_vtrace.agent", "train", "--out",
            str(out), *SMALL, *flags]


def _train(tmp_path, out, *flags, **extra):
    """A train command run to its end: `(exit status, stdout, stderr)`."""
    result = subprocess.run(_command(out, *flags), capture_output=True,
                            text=True, timeout=SUBPROCESS_TIMEOUT_S,
                            env=_env(tmp_path, **extra))
    return result.returncode, result.stdout, result.stderr


def _start(tmp_path, out, *flags, **extra):
    return subprocess.Popen(_command(out, *flags), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=_env(tmp_path, **extra))


def _wait_until(process, what, condition):
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while not condition():
        assert process.poll() is None, (what, process.communicate())
        assert time.monotonic() < deadline, f"{what}: not within {POLL_TIMEOUT_S} s"
        time.sleep(0.1)


def _communicate(process):
    """`(stdout, stderr)` once `process` has exited (bounded)."""
    try:
        return process.communicate(timeout=POLL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)  # faulthandler prints the stacks
        stdout, stderr = process.communicate(timeout=60)
        pytest.fail(f"no exit within {POLL_TIMEOUT_S} s:\n{stderr[-8000:]}")


def _checkpoints(out):
    return sorted(int(re.search(r"ckpt-(\d+)\.index$", path).group(1)) for path
                  in glob.glob(str(pathlib.Path(out) / "checkpoints" / "ckpt-*.index")))


def _error_line(stderr):
    """The one ``error: …`` line a failed command ends with (no traceback)."""
    assert "Traceback" not in stderr, stderr[-4000:]
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr[-4000:]
    return lines[0]


def _assert_kept(out, error_pattern, policy=True):
    """The outputs a failed run keeps: summary.json naming the error, its
    newest checkpoint complete (every tensor reads back), the policy, and no
    half-written checkpoint or policy beside them."""
    out = pathlib.Path(out)
    summary = json.loads((out / "summary.json").read_text())
    assert re.search(error_pattern, summary["error"]), summary["error"]
    assert summary["error_traceback"]
    numbers = _checkpoints(out)
    assert numbers, "no checkpoint kept"
    _run_dir._read_every_tensor(str(out / "checkpoints" / f"ckpt-{numbers[-1]}"))
    assert not glob.glob(str(out / "checkpoints" / "*_temp*"))
    assert not (out / "policy.tmp").exists()
    assert (out / "policy" / "saved_model.pb").exists() is policy
    return summary


def test_a_run_directory_has_one_owner_and_a_killed_owners_lock_is_taken_over(
        tmp_path):
    """A second train and a --restart on a directory a live run owns are
    refused, naming its pid, and change nothing there; after a SIGKILL the
    next run takes the lock over: here an env that raises under --sync,
    which ends in one line and keeps the checkpoint, policy and summary."""
    out = tmp_path / "run"
    owner = _start(tmp_path, out, *ENDLESS)
    try:
        _wait_until(owner, "checkpoint 1", lambda: _checkpoints(out))
        for flags in (ENDLESS, ("--restart",)):
            status, _, stderr = _train(tmp_path, out, *flags)
            assert status == 2, stderr[-4000:]
            line = _error_line(stderr)
            assert f"in use by another training process (pid {owner.pid}" in line
        assert owner.poll() is None  # Untouched: still training.
    finally:
        owner.kill()
        _communicate(owner)
    assert (out / "train.lock").read_text().split()[0] == str(owner.pid)
    status, _, stderr = _train(
        tmp_path, out, "--restart", "--sync", "--env", faulty_env.RAISING_ID,
        "--total-env-steps", "6400", FAULTY_ENV_AT_STEP="100")
    assert status == 1, stderr[-4000:]
    line = _error_line(stderr)
    assert line.startswith("error: the environment: the actor raised "
                           "RuntimeError: injected env fault at step 100"), line
    assert f"kept in {out}: checkpoint" in line and "policy/, summary.json" in line
    summary = _assert_kept(out, "injected env fault")
    assert summary["env_steps"] == 6 * 64  # The updates before the fault.


@pytest.mark.parametrize("backend", ["thread", "local"])
def test_a_hung_env_is_given_up_on_after_one_sigterm(tmp_path, backend):
    """An env that hangs in step(): one SIGTERM stops the run (the wait for
    the unroll is given up after the documented 10 s), with one error line,
    exit status 143, the summary, the checkpoint and the policy."""
    out, mark = tmp_path / "run", tmp_path / "hung"
    process = _start(tmp_path, out, "--backend", backend, "--env",
                     faulty_env.HANGING_ID, *ENDLESS,
                     FAULTY_ENV_AT_STEP="100", FAULTY_ENV_HUNG_MARK=str(mark))
    try:
        _wait_until(process, "the hang", mark.exists)
    except BaseException:
        process.kill()
        raise
    process.send_signal(signal.SIGTERM)
    _, stderr = _communicate(process)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-4000:]
    line = _error_line(stderr)
    part = "the environment" if backend == "local" else "the actors"
    assert line.startswith(f"error: {part}: no unroll came within 10 s of "
                           "SIGTERM (a hung environment?)"), line
    summary = _assert_kept(out, "no unroll came within 10 s")
    assert summary["interrupted"] and summary["stop_signal"] == "SIGTERM"
    assert summary["discarded_unrolls"] == int(backend == "thread")


@contextlib.contextmanager
def _small_disk(directory, size):
    """A tmpfs of `size` at `directory` (root only: skipped elsewhere)."""
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}",
                              "tmpfs", str(directory)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {mounted.stderr!r}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def test_a_full_disk_ends_in_one_line_with_the_newest_complete_checkpoint(
        tmp_path):
    """A 330 kB disk holds two checkpoints (≈ 120 kB each, with the
    optimizer's state) but not the third: the save that fails is removed,
    the two before it are kept, and the error names the write."""
    with _small_disk(tmp_path / "disk", "330k") as disk:
        out = disk / "run"
        status, _, stderr = _train(tmp_path, out, *ENDLESS,
                                   "--hidden-sizes", "64", "64")
        assert status == 1, stderr[-4000:]
        line = _error_line(stderr)
        assert line.startswith("error: writing "), line
        assert "No space left on device" in line, line
        assert re.search(r"kept in .*: checkpoint \d+ \(the newest complete", line)
        numbers = _checkpoints(out)
        assert f"checkpoint {numbers[-1]} (the newest" in line
        # The policy does not fit either: the line says so.
        _assert_kept(out, "No space left on device", policy=False)
        assert "not written: policy/" in line


def test_an_unreachable_ray_leaves_nothing_that_blocks_the_corrected_command(
        tmp_path):
    """RAY_ADDRESS pointing nowhere: one line naming the actors and the
    address, and no config.json left; the same command with the thread
    backend then runs there. That run's episodes.csv, edited out of order,
    is kept aside on the next resume, under the name the message gives."""
    out = tmp_path / "run"
    flags = ("--total-env-steps", "1280")
    status, _, stderr = _train(tmp_path, out, *flags, "--backend", "ray",
                               RAY_ADDRESS="127.0.0.1:1")
    assert status == 1, stderr[-4000:]
    line = _error_line(stderr)
    assert line.startswith("error: the actors: ConnectionError: "
                           "RAY_ADDRESS='127.0.0.1:1'"), line
    assert "the run did not start" in line
    assert not [name for name in _run_dir.OUTPUTS if (out / name).exists()]
    status, _, stderr = _train(tmp_path, out, *flags)
    assert status == 0, stderr[-4000:]

    episodes = out / "episodes.csv"
    rows = list(csv.reader(episodes.open()))
    assert len(rows) > 4, rows
    rows[2][0] = "999999"  # One env_steps value rewritten out of order.
    with episodes.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    edited = episodes.read_bytes()
    status, _, stderr = _train(tmp_path, out, *flags)
    assert status == 0, stderr[-4000:]
    kept_as = out / "episodes.csv.out-of-order"
    assert f"the file as it was is kept as {kept_as}" in stderr
    assert kept_as.read_bytes() == edited
    assert list(csv.reader(episodes.open())) == rows[:2] + rows[3:]


def test_a_csv_that_goes_backwards_is_kept_aside_not_cut(tmp_path, capsys):
    """Rows out of order: every row up to the checkpoint's env step is kept
    (in file order), the one past it left out, and the file as it was is
    kept aside (numbered after an earlier copy), named on stderr."""
    path = tmp_path / "episodes.csv"
    original = "env_steps,return,length\n64,9.0,9\n9999,1.0,1\n128,8.0,8\n640,7.0,7\n"
    path.write_text(original)
    (tmp_path / "episodes.csv.out-of-order").write_text("an earlier copy")
    kept = recording._truncate_csv(str(path), recording.EPISODES_HEADER, 640)
    assert kept == [["64", "9.0", "9"], ["128", "8.0", "8"], ["640", "7.0", "7"]]
    copy = tmp_path / "episodes.csv.out-of-order.2"
    assert copy.read_text() == original
    assert f"kept as {copy}" in capsys.readouterr().err
    # In order, the rows past the checkpoint are cut (acted again) quietly.
    path.write_text("env_steps,return,length\n64,9.0,9\n704,1.0,1\n")
    recording._truncate_csv(str(path), recording.EPISODES_HEADER, 640)
    assert not (tmp_path / "episodes.csv.out-of-order.3").exists()


def test_an_actor_failure_with_a_traceback_is_one_line():
    """The line of an actor that failed: its head and the exception its
    traceback ends with, and what was kept."""
    failure = backends.ActorFailure(
        "actor 0 failed 3 times in a row (Config.max_actor_failures=3); the "
        "last time:\nactor thread 0 raised:\nTraceback (most recent call "
        "last):\n  File \"x.py\", line 1, in step\n    boom()\n"
        "RuntimeError: boom\n")
    _faults.set_kept(failure, "kept in out: checkpoint 3 (the newest complete one)")
    line, status = _faults.describe(failure)
    assert status == 1
    assert line == (
        "error: actor 0 failed 3 times in a row (Config.max_actor_failures=3);"
        " the last time: actor thread 0 raised: RuntimeError: boom (kept in "
        "out: checkpoint 3 (the newest complete one))")
