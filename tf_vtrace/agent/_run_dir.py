"""The run directory across processes: one owner, resume, restart, trusted
checkpoints.

One process at a time trains in a run directory (`owned`): it holds an
exclusive lock on ``train.lock`` there, which names its pid; a second one is
refused with a `RunDirectoryLocked` naming that pid. The operating system
drops the lock when its process ends, however it ends (a SIGKILL included),
so a lock left by a killed process is simply taken over.

A run directory with a ``config.json`` is resumed by `train` (`prepare`): the
config must be the same (the differing fields are named otherwise), and the
newest checkpoint that restores completely is the start (`Checkpoints`). A
checkpoint that does not (cut short by a kill during the save, or corrupted:
TensorFlow checks every tensor's CRC32C) is moved to ``checkpoints/broken/``
and the previous one is tried; with none usable a `RunDirectoryError` says
so. The loop's own state (counters, the policy-lag weight history) travels
inside each checkpoint, in one string variable, so it is saved and restored
with the weights or not at all (`LoopCounters`, `save_loop`, `restore_loop`).
"""

import collections
import contextlib
import dataclasses
import glob
import io
import json
import os
import shutil
import socket
import sys

import numpy as np
import tensorflow as tf

# What a run writes into its directory (`--restart` removes these only).
OUTPUTS = ("config.json", "episodes.csv", "summary.json",
           "learning_curve.png", "checkpoints", "tensorboard", "policy",
           "policy.tmp", "policy.old", "evaluations.csv", "policy_best",
           "policy_best.tmp", "policy_best.old")
LOCK = "train.lock"


class RunDirectoryError(RuntimeError):
    """The run directory cannot be resumed (another config, no usable
    checkpoint, outputs without a config) or written."""


class RunDirectoryLocked(RunDirectoryError):
    """Another live process trains in the run directory."""


def worker_dir(out_dir, strategy):
    """`(run directory, worker index)`: worker i of a multi-worker run
    (`strategy`'s cluster) writes into ``out_dir/worker-i``."""
    resolver = getattr(strategy, "cluster_resolver", None)
    worker_index = (resolver.task_id or 0) if resolver is not None else 0
    if worker_index:
        out_dir = os.path.join(out_dir, f"worker-{worker_index}")
    return out_dir, worker_index


@contextlib.contextmanager
def owned(out_dir):
    """Holds the lock of run directory `out_dir` (made if missing) while in
    the context.

    Raises:
      RunDirectoryLocked: Another live process holds it (its pid named).
      RunDirectoryError: The directory cannot be made or written.
    """
    import fcntl
    path = os.path.join(out_dir, LOCK)
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:  # A file there, no permission, a read-only disk.
        raise _cannot_write(out_dir, error) from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 200, 0).decode(errors="replace").split()
            raise RunDirectoryLocked(
                f"{out_dir} is in use by another training process (pid "
                f"{' on '.join(owner[:2]) or 'not written yet'}, "
                f"holding {path}); wait for it to end or stop it, or pass "
                f"another --out.") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # Releases the lock (the file stays: see `owned`).


def _cannot_write(out_dir, error):
    return RunDirectoryError(
        f"{out_dir}: cannot write a run there ({error.strerror or error}: "
        f"{error.filename or out_dir}).")


def undo_start(out_dir):
    """Removes what a new run that failed before its first update wrote
    (its outputs: none of them held anything of an earlier run), so that
    the corrected command starts afresh there."""
    _remove_outputs(out_dir)


def write_directory(path, write):
    """Writes the directory `path` whole or not at all: `write(tmp)` writes
    it at ``path + ".tmp"``, which then takes the place of the old one
    (moved to ``path + ".old"`` first, removed after). If `write` fails
    (a full disk), what it wrote is removed, the old one left in place."""
    tmp, old = path + ".tmp", path + ".old"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    if os.path.isdir(path):
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def prepare(config, out_dir, restart):
    """Makes `out_dir` ready; returns whether the run there is resumed.

    Args:
      config: The run's `Config`.
      out_dir: The run directory.
      restart: Remove the outputs of a run there first (nothing else).

    Raises:
      RunDirectoryError: A run with another config is there, outputs
        without a ``config.json``, or the directory cannot be made or
        written.
    """
    config_path = os.path.join(out_dir, "config.json")
    if restart:
        _remove_outputs(out_dir)
    elif os.path.exists(config_path):
        _check_same_config(config, config_path)
        return True
    elif any(os.path.exists(os.path.join(out_dir, name)) for name in OUTPUTS):
        raise RunDirectoryError(
            f"{out_dir} holds outputs of a run but no config.json; pass "
            f"--restart (restart=True) to start a new run there.")
    try:
        os.makedirs(out_dir, exist_ok=True)
        _write_atomically(config_path, json.dumps(config.to_dict(), indent=2))
    except OSError as error:  # A file there, no permission, a read-only disk.
        raise _cannot_write(out_dir, error) from error
    return False


def _remove_outputs(out_dir):
    for name in OUTPUTS:
        path = os.path.join(out_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


# The fields whose default changed after they were added, at the value that
# behaves as the code did before each was added (CartPole stepped in
# gymnasium's SyncVectorEnv; the optimizer was Adam; the actor thread
# queued one unroll).
_BEFORE_THE_FIELD = {"vector_env": "gymnasium", "optimizer": "adam",
                     "queue_size": 1}


def _check_same_config(config, config_path):
    try:
        with open(config_path) as handle:
            saved = json.load(handle)
        reason = (None if isinstance(saved, dict)
                  else f"a JSON {type(saved).__name__}, not an object")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        reason = error
    if reason is not None:
        raise RunDirectoryError(
            f"{config_path} is not a readable run config ({reason}); pass "
            f"--restart (restart=True) to start a new run there.")
    current = json.loads(json.dumps(config.to_dict()))  # tuples as lists
    # A field added to Config after the run was written ran at the value
    # that behaves as the code did before it: its default, unless the
    # default has changed since (`_BEFORE_THE_FIELD`).
    defaults = {**json.loads(json.dumps(type(config)().to_dict())),
                **_BEFORE_THE_FIELD}
    saved = {**{k: defaults[k] for k in current if k not in saved}, **saved}
    missing = "(absent)"
    differing = [f"{key}: {saved.get(key, missing)!r} there, "
                 f"{current.get(key, missing)!r} now"
                 for key in sorted(set(saved) | set(current))
                 if saved.get(key, missing) != current.get(key, missing)]
    if differing:
        raise RunDirectoryError(
            f"{config_path} is the config of another run; differing fields: "
            f"{'; '.join(differing)}. Resume with the same config, or pass "
            f"--restart (restart=True) to start over.")


def _write_atomically(path, text):
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.replace(path + ".tmp", path)


@dataclasses.dataclass
class LoopCounters:
    """What the loop has done, saved in every checkpoint (so a resumed run
    continues them): loop updates (applied and skipped), env steps, skipped
    updates, the count of unrolls per policy lag, and the unrolls and
    restarts of each actor in the processes before this one."""

    updates: int = 0
    env_steps: int = 0
    skipped: int = 0
    lags: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)
    unrolls_before: list = None
    restarts_before: list = None

    def unrolls_per_actor(self, actor, start):
        """Each actor's unrolls in all the run's processes: `actor`'s own
        count (or, for an actor without one, the updates since this process
        began at update `start`) plus those before."""
        return _add(self.unrolls_before, list(getattr(
            actor, "unrolls_per_actor", [self.updates - start])))

    def restarts_per_actor(self, actor):
        """Each actor's restarts in all the run's processes."""
        return _add(self.restarts_before,
                    list(getattr(actor, "restarts_per_actor", [0])))


def _add(before, now):
    """Per-actor counts of the earlier processes plus this one's."""
    return [a + b for a, b in zip(before or [0] * len(now), now)]


def save_loop(checkpoints, counters, history, actor, start):
    """Saves checkpoint number ``counters.updates`` into `checkpoints`: the
    objects it tracks, `counters` (each actor's unrolls and restarts
    included: `actor`'s, in this process since update `start`) and the
    weights the `WeightHistory` `history` keeps."""
    state = dataclasses.asdict(counters)
    state.update(lags={str(k): n for k, n in counters.lags.items()},
                 unrolls_before=counters.unrolls_per_actor(actor, start),
                 restarts_before=counters.restarts_per_actor(actor))
    checkpoints.save(counters.updates, encode_state(state, history.kept()))


def restore_loop(checkpoints, history):
    """Restores the newest usable checkpoint of `checkpoints`
    (`Checkpoints.restore_latest`) and pushes the weights it kept into the
    `WeightHistory` `history`; returns its number and `LoopCounters`, or
    ``(0, None)`` when there is none."""
    number, blob = checkpoints.restore_latest()
    if blob is None:
        return 0, None
    state, kept = decode_state(blob)
    state["lags"] = collections.Counter(
        {int(k): n for k, n in state.get("lags", {}).items()})
    for version, weights in kept:
        history.push(version, weights)
    return number, LoopCounters(**state)


def encode_state(state, history):
    """Bytes of the loop's JSON `state` and its `(version, weights)` history."""
    arrays = {f"history_{i}_{j}": weight for i, (_, weights) in
              enumerate(history) for j, weight in enumerate(weights)}
    header = dict(state, history=[(v, len(w)) for v, w in history])
    buffer = io.BytesIO()
    np.savez(buffer, state=np.array(json.dumps(header)), **arrays)
    return buffer.getvalue()


def decode_state(blob):
    """`(state, history)` from `encode_state`'s bytes."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
        state = json.loads(str(arrays["state"]))
        history = [(version, [arrays[f"history_{i}_{j}"] for j in range(n)])
                   for i, (version, n) in enumerate(state.pop("history"))]
    return state, history


class Checkpoints:
    """The run's checkpoints of `objects` plus the loop's state bytes.

    Args:
      directory: The ``checkpoints`` directory.
      max_to_keep: Complete checkpoints kept.
      **objects: What `tf.train.Checkpoint` tracks (network, optimizer).
    """

    def __init__(self, directory, max_to_keep=2, **objects):
        self.directory = directory
        self._state = tf.Variable(b"", dtype=tf.string, trainable=False)
        self._objects = dict(objects, loop_state=self._state)
        self._checkpoint = tf.train.Checkpoint(**self._objects)
        self._max_to_keep = max_to_keep
        self._manager = None
        self.number = None  # Of the checkpoint last saved or restored.

    def restore_latest(self):
        """Restores the newest usable checkpoint; returns its number and
        state bytes, `(0, None)` when there is none.

        Raises:
          RunDirectoryError: There are checkpoints but none is usable.
        """
        numbers = sorted(_checkpoint_numbers(self.directory), reverse=True)
        failures = []
        for number in numbers:
            prefix = os.path.join(self.directory, f"ckpt-{number}")
            try:
                _read_every_tensor(prefix)
                # A fresh `Checkpoint`: one that failed to restore keeps
                # restores pending from the broken files.
                tf.train.Checkpoint(**self._objects).restore(
                    prefix).assert_existing_objects_matched()
                blob = self._state.numpy()
                decode_state(blob)
            # What a broken file raises varies (OpError, IndexError from the
            # reader of a short data file, ValueError, AssertionError ...).
            except Exception as error:
                reason = str(error).strip().splitlines()[0][:300]
                failures.append(f"{prefix}: {type(error).__name__}: {reason}")
                print(f"checkpoint {prefix} is not usable ({failures[-1]}); "
                      f"moved to {self.directory}/broken/", file=sys.stderr)
                self._move_broken(number)
                continue
            self.number = number
            return number, blob
        if failures:
            raise RunDirectoryError(
                f"no usable checkpoint in {self.directory}: "
                f"{' | '.join(failures)}. Pass --restart (restart=True) to "
                f"start over.")
        return 0, None

    def _move_broken(self, number):
        broken = os.path.join(self.directory, "broken")
        os.makedirs(broken, exist_ok=True)
        for path in glob.glob(os.path.join(self.directory, f"ckpt-{number}.*")):
            os.replace(path, os.path.join(broken, os.path.basename(path)))

    def save(self, number, blob):
        """Saves checkpoint `number` with the state bytes `blob` (once). One
        that fails (a full disk) is removed, the newest complete one left
        the newest, and the error raised."""
        if number == self.number:
            return
        if self._manager is None:
            self._manager = _manager(self._checkpoint, self.directory,
                                     self._max_to_keep)
        self._state.assign(blob)
        try:
            self._manager.save(number)
        except BaseException:
            for path in glob.glob(os.path.join(self.directory,
                                               f"ckpt-{number}[._]*")):
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.remove(path)
            raise
        self.number = number


def _read_every_tensor(prefix):
    """Reads every tensor of checkpoint `prefix` (TensorFlow checks each
    one's CRC32C), before any variable is assigned from it."""
    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_shape_map():
        reader.get_tensor(name)


def _checkpoint_numbers(directory):
    """The numbers N of the ``ckpt-N.index`` files in `directory`."""
    numbers = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.index")):
        number = os.path.basename(path)[len("ckpt-"):-len(".index")]
        if number.isdigit():
            numbers.append(int(number))
    return numbers


def _manager(checkpoint, directory, max_to_keep):
    """A `tf.train.CheckpointManager`; a corrupt ``checkpoint`` list file
    (only an index of names, rewritten by each save) is removed first."""
    try:
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep)
    except Exception:
        os.remove(os.path.join(directory, "checkpoint"))
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep)
