"""What a run leaves behind: episodes CSV, TensorBoard scalars, the curve,
the summary.

* ``episodes.csv``: one row per finished episode (env steps at the end of its
  unroll, return, length);
* ``evaluations.csv``: one row per greedy evaluation during training
  (`Config.eval_every`, `tf_vtrace.agent.evaluate.TrainingEvaluation`): env
  steps, learner update, mean, min and max return of its episodes;
* ``tensorboard/``: scalars per learner update (every `every` updates): the
  recent mean return, the loss terms and diagnostics of `impala_loss`
  (ρ clip fraction, mean ρ, entropy, KL), the policy lag, the throughput,
  the skipped (non-finite) updates and the actor restarts so far; and the
  greedy evaluations' mean and min return (``eval/``);
* ``learning_curve.png``: the episode returns and their running mean against
  env steps, and the greedy evaluations (matplotlib, Agg backend, no display
  needed);
* ``summary.json``: the run's numbers at its end (`write_summary`).
"""

import collections
import csv
import glob
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import tensorflow as tf

from tf_vtrace import _dispatch

__all__ = ["Recorder", "plot_learning_curve", "read_episodes",
           "read_evaluations", "running_mean", "write_summary"]

RECENT_EPISODES = 100
# The diagnostics of how off-policy the data were (`impala.DIAGNOSTICS`),
# whose mean over the last `RECENT_UPDATES` updates goes in the summary.
BEHAVIOUR_DIAGNOSTICS = ("rho_clipped_fraction", "ess_fraction", "kl")
RECENT_UPDATES = 100
EPISODES_HEADER = ("env_steps", "return", "length")
EVALUATIONS_HEADER = ("env_steps", "update", "mean_return", "min_return",
                      "max_return")


def running_mean(values, window):
    """Mean of the last `window` values at each index (fewer at the start).

    Args:
      values: A 1-D sequence.
      window: The window length.

    Returns:
      A float64 numpy array like `values`.

    Examples:
      >>> running_mean([1, 2, 3, 4], 2).tolist()
      [1.0, 1.5, 2.5, 3.5]
    """
    values = np.asarray(values, np.float64)
    sums = np.cumsum(np.concatenate([[0.], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def read_episodes(path):
    """(env_steps, returns) numpy arrays from an ``episodes.csv``."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return (np.array([float(r["env_steps"]) for r in rows]),
            np.array([float(r["return"]) for r in rows]))


def read_evaluations(path):
    """(env_steps, mean returns) numpy arrays from an ``evaluations.csv``
    (empty where the file is missing: a run without `Config.eval_every`)."""
    if not os.path.exists(path):
        return np.zeros(0), np.zeros(0)
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return (np.array([float(r["env_steps"]) for r in rows]),
            np.array([float(r["mean_return"]) for r in rows]))


def plot_learning_curve(episodes_csv, png_path, title=None,
                        evaluations_csv=None):
    """Plots returns and their running mean (window 100) against env steps,
    and the greedy evaluations' mean returns where there are some.

    Args:
      episodes_csv: An ``episodes.csv`` written by `Recorder`.
      png_path: Where to write the PNG.
      title: The figure title.
      evaluations_csv: An ``evaluations.csv`` written by `Recorder` (None or
        missing: no evaluations drawn).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, returns = read_episodes(episodes_csv)
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(steps, returns, ".", alpha=0.15, markersize=2, label="episode")
    if len(returns):
        axes.plot(steps, running_mean(returns, RECENT_EPISODES),
                  label=f"mean of last {RECENT_EPISODES}")
    eval_steps, eval_returns = read_evaluations(evaluations_csv or "")
    if len(eval_returns):
        axes.plot(eval_steps, eval_returns, "o-", color="black", markersize=4,
                  linewidth=1, label="greedy evaluation (mean)")
    axes.set_xlabel("environment steps")
    axes.set_ylabel("episode return")
    axes.set_title(title or "learning curve")
    axes.legend(loc="upper left")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    plt.close(figure)


class Recorder:
    """Writes the episodes CSV and the TensorBoard scalars of one run.

    Args:
      out_dir: The run directory.
      every: Write TensorBoard scalars after the first update and every
        `every` updates.
      resume: None: a new run (files written from scratch). Else
        `(env_steps, updates)` of the checkpoint a run resumes from: what
        ``episodes.csv`` and ``tensorboard/`` hold after that env step (the
        work a killed process did after its last checkpoint, done again
        now) is removed, and both continue from there.
      evaluations: The run evaluates during training: ``evaluations.csv``
        is written (and truncated like ``episodes.csv`` on a resume).
    """

    def __init__(self, out_dir, every=10, resume=None, evaluations=False):
        self.out_dir = out_dir
        self.every = every
        self.episodes_path = os.path.join(out_dir, "episodes.csv")
        self.recent_returns = collections.deque(maxlen=RECENT_EPISODES)
        self.recent_diagnostics = {key: collections.deque(maxlen=RECENT_UPDATES)
                                   for key in BEHAVIOUR_DIAGNOSTICS}
        self.updates = 0
        self.evaluations_path = os.path.join(out_dir, "evaluations.csv")
        if resume is None:  # New files: their headers.
            _truncate_csv(self.episodes_path, EPISODES_HEADER, -1)
            if evaluations:
                _truncate_csv(self.evaluations_path, EVALUATIONS_HEADER, -1)
        else:
            env_steps, self.updates = resume
            kept = _truncate_csv(self.episodes_path, EPISODES_HEADER, env_steps)
            self.recent_returns.extend(float(row[1]) for row in kept)
            if evaluations:
                _truncate_csv(self.evaluations_path, EVALUATIONS_HEADER,
                              env_steps)
            _truncate_events(os.path.join(out_dir, "tensorboard"), env_steps)
        self._episodes_file = open(self.episodes_path, "a", newline="")
        self._episodes = csv.writer(self._episodes_file)
        self._writer = tf.summary.create_file_writer(
            os.path.join(out_dir, "tensorboard"))
        self._scalar_writers = {}  # names → compiled writer (`_write_scalars`)

    @property
    def mean_return(self):
        """Mean return of the last 100 finished episodes (NaN before one)."""
        returns = self.recent_returns  # (np.mean of a deque: ≈20x slower)
        return sum(returns) / len(returns) if returns else float("nan")

    def behaviour_summary(self):
        """``rho_clipped_fraction_last_100``, ``ess_fraction_last_100``,
        ``kl_last_100``: their means over this process's last 100 updates
        (None before one)."""
        return {f"{key}_last_{RECENT_UPDATES}":
                (round(sum(recent) / len(recent), 4) if recent else None)
                for key, recent in self.recent_diagnostics.items()}

    def record(self, env_steps, unroll, diagnostics, counters):
        """Logs one update: its unroll's finished episodes, the learner's
        diagnostics and the loop's `counters` (a dict of floats: throughput,
        skipped updates, actor restarts)."""
        self.updates += 1
        for key, recent in self.recent_diagnostics.items():
            if key in diagnostics:
                recent.append(diagnostics[key])
        for ret, length in zip(unroll["episode_returns"],
                               unroll["episode_lengths"]):
            self._episodes.writerow([env_steps, float(ret), int(length)])
            self.recent_returns.append(float(ret))
        if self.updates % self.every and self.updates != 1:
            return
        scalars = {f"learner/{key}": value
                   for key, value in dict(diagnostics, **counters).items()}
        if self.recent_returns:
            scalars["episode/mean_return"] = self.mean_return
        self._write_scalars(env_steps, scalars)

    def _write_scalars(self, env_steps, scalars):
        """`scalars` (name → float) at step `env_steps`, in one compiled
        call per set of names (the eager `tf.summary.scalar` per name held
        the interpreter lock the actor threads need, docs/records/scaling.md)."""
        names = tuple(scalars)
        write = self._scalar_writers.get(names)
        if write is None:
            def write_all(values, step):
                with self._writer.as_default(step=step):
                    for i, name in enumerate(names):
                        tf.summary.scalar(name, values[i])
            write = tf.function(write_all, autograph=False, input_signature=[
                tf.TensorSpec([len(names)], tf.float32),
                tf.TensorSpec([], tf.int64)]).get_concrete_function()
            self._scalar_writers[names] = write
        _dispatch.call_concrete_unrecorded(write, [
            tf.constant(list(scalars.values()), tf.float32),
            tf.constant(env_steps, tf.int64)])

    def record_evaluation(self, env_steps, update, returns):
        """Logs one greedy evaluation (its episodes' `returns`) to
        ``evaluations.csv`` (on disk at once: evaluations are rare) and
        TensorBoard."""
        row = [env_steps, update, float(np.mean(returns)),
               float(np.min(returns)), float(np.max(returns))]
        with open(self.evaluations_path, "a", newline="") as handle:
            csv.writer(handle).writerow(row)
        with self._writer.as_default(step=env_steps):
            tf.summary.scalar("eval/greedy_return", row[2])
            tf.summary.scalar("eval/greedy_return_min", row[3])

    def flush(self):
        """Puts everything recorded so far on disk (before a checkpoint:
        what a resumed run keeps must be there)."""
        self._episodes_file.flush()
        os.fsync(self._episodes_file.fileno())
        self._writer.flush()

    def close(self):
        """Flushes everything and writes ``learning_curve.png``."""
        self._episodes_file.close()
        self._writer.flush()
        self._writer.close()
        plot_learning_curve(self.episodes_path,
                            os.path.join(self.out_dir, "learning_curve.png"),
                            evaluations_csv=self.evaluations_path)


def _truncate_csv(path, header, env_steps):
    """Keeps the complete rows of the CSV at `path` (columns `header`, the
    first env steps) up to `env_steps`, in their order (a killed process
    may have left a half-written last line, and the rows after its last
    checkpoint are acted again); returns them. A missing file is written
    with the header only.

    A damaged file is never cut silently. A row that does not parse (a
    corrupt byte, a cut-off line) is left out and the rows after it are
    kept; if it was not the last row, the file as it was is kept beside as
    ``<name>.unreadable``. Env steps that go backwards (a row edited by
    hand, or written by another process) leave out the rows after
    `env_steps` wherever they are, and the file as it was is kept beside
    as ``<name>.out-of-order``. Either is said on stderr, naming the copy.
    """
    kept, unreadable, backwards = [], False, None
    if os.path.exists(path):
        # errors="replace" and no NULs: a corrupt byte spoils its row only.
        with open(path, newline="", errors="replace") as handle:
            rows = list(csv.reader(line.replace("\0", "") for line in handle))[1:]
        previous = -math.inf
        for position, row in enumerate(rows):
            try:  # Every field of a complete row parses.
                values = [float(field) for field in row]
            except ValueError:
                values = []
            if len(values) != len(header):
                unreadable |= position < len(rows) - 1
                continue
            if values[0] < previous and backwards is None:
                backwards = (position + 2, values[0], previous)
            previous = values[0]
            if values[0] <= env_steps:
                kept.append(row)
        if unreadable:
            _keep_aside(path, ".unreadable", "a row that does not parse")
        if backwards is not None:
            _keep_aside(path, ".out-of-order",
                        "env steps that go backwards (line {}: {:g} after "
                        "{:g})".format(*backwards))
    with open(path + ".tmp", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(kept)
    os.replace(path + ".tmp", path)
    return kept


def _keep_aside(path, suffix, reason):
    """Copies `path` to ``path + suffix`` (numbered after an earlier copy)
    and says so on stderr."""
    copy, number = path + suffix, 1
    while os.path.exists(copy):
        number += 1
        copy = f"{path}{suffix}.{number}"
    shutil.copyfile(path, copy)
    print(f"{path} has {reason}; the file as it was is kept as {copy}",
          file=sys.stderr)


def _truncate_events(directory, env_steps):
    """Rewrites each TensorBoard events file in `directory` without the
    events after step `env_steps` (and a record cut off by a kill)."""
    for path in glob.glob(os.path.join(directory, "*tfevents*")):
        if path.endswith(".tmp"):
            os.remove(path)
            continue
        records = []
        try:
            for record in tf.data.TFRecordDataset(path):
                record = record.numpy()
                if tf.compat.v1.Event.FromString(record).step <= env_steps:
                    records.append(record)
        except tf.errors.DataLossError:
            pass  # The cut-off last record.
        with tf.io.TFRecordWriter(path + ".tmp") as writer:
            for record in records:
                writer.write(record)
        os.replace(path + ".tmp", path)


def write_summary(config, out_dir, worker_index, clock_start, loop_stats):
    """Writes ``summary.json`` into `out_dir` (whole or not at all) and
    returns it.

    It holds: env steps, updates, wall and process CPU seconds (since
    `clock_start`, a `(time.time(), time.process_time())` pair), the final
    mean return (null before the first finished episode: the file is strict
    JSON, with null for any value that is not finite), whether the run was
    interrupted (``stop_signal``) or stopped by an error (``error``: the
    failing part and what happened, as the command line's ``error:`` line
    says it; ``error_traceback``: its whole traceback), the
    updates skipped because they were non-finite (``skipped_updates``); the
    actor backend and its number of actors, the unrolls each actor gave, the
    measured policy lag (learner version − the unroll's policy version:
    mean, max and a count per value), the loop's env steps/s and learner
    steps/s after the first update (which also compiles the learner step and
    waits for the actors to start), the fractions of that time the learner
    waited for unrolls and the actors for the learner
    (`tf_vtrace.agent._loop_stats.IdleClock`), the mean updates per learner
    call in this process (``updates_per_learner_call``), the ρ̄-clipped
    fraction, ESS/N and KL(μ‖π) over its last 100 updates
    (`Recorder.behaviour_summary`), the unrolls dropped
    at a stop (``discarded_unrolls``: 0 unless an actor did not hand in its
    unroll in time or a second signal came, see `tf_vtrace.agent.train`),
    and with ``config.eval_every`` the last and best greedy evaluation
    (``eval_greedy_last``, ``eval_greedy_best``, ``eval_best_env_steps``,
    ``evaluations``, ``eval_s``).

    Args:
      config: The run's `Config`.
      out_dir: The run directory.
      worker_index: This host's task index (0 outside a multi-worker run).
      clock_start: `(time.time(), time.process_time())` at the run's start.
      loop_stats: The loop's numbers (`tf_vtrace.agent._loop_stats.
        loop_summary`).
    """
    wall_start, cpu_start = clock_start
    summary = {
        "env_id": config.env_id, "seed": config.seed,
        "policy_lag": config.policy_lag, "correction": config.correction,
        "strategy": config.strategy, "worker_index": worker_index,
        "env_steps": loop_stats.pop("env_steps"),
        "learner_updates": loop_stats.pop("learner_updates"),
        "wall_s": round(time.time() - wall_start, 1),
        "cpu_s": round(time.process_time() - cpu_start, 1),
        "mean_return_last_100": loop_stats.pop("mean_return_last_100"),
        "interrupted": loop_stats.pop("interrupted"),
        "backend": config.backend, "num_actors": config.num_actors,
        **loop_stats,
    }
    summary = _finite_or_none(summary)
    path = os.path.join(out_dir, "summary.json")
    with open(path + ".tmp", "w") as handle:
        json.dump(summary, handle, indent=2, allow_nan=False)
    os.replace(path + ".tmp", path)
    return summary


def _finite_or_none(value):
    """`value` with every NaN or ±inf float (at any depth) as None: JSON has
    no NaN, and strict readers (jq, JavaScript) refuse Python's ``NaN``."""
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
