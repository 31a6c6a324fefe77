"""The training loop: actor → unroll → learner, with the policy lag between.

`train(config, out_dir)` runs ``config.num_updates`` updates. Each one hands
the actors the learner weights from ``policy_lag`` updates ago
(`WeightHistory`), takes one unroll of T steps from B envs, and runs one
learner step on it (with the unrolls already queued behind it, up to
``config.updates_per_call`` in one call: `actor_learner_steps`). With the
``"thread"`` (default), ``"process"`` and ``"ray"`` backends the actors act
while the learner learns and each unroll's policy lag is measured; with
``"local"`` (``--sync``) the actor acts here, then the learner learns
(`tf_vtrace.agent.backends`).

Into `out_dir` it writes ``config.json``, ``episodes.csv``, ``tensorboard/``,
``learning_curve.png`` and ``summary.json`` (`tf_vtrace.agent.recording`; the
summary's fields are listed at `recording.write_summary`); ``checkpoints/``
(network, optimizer and loop state every ``config.checkpoint_every_s``
seconds or ``config.checkpoint_every`` updates and at the end, the last two
kept: `tf_vtrace.agent._run_dir`); ``policy/`` (`tf_vtrace.export.
export_policy`); with ``config.eval_every`` ``evaluations.csv`` and
``policy_best/`` (`tf_vtrace.agent.evaluate.TrainingEvaluation`, the chief
only). In a multi-worker run every host runs this loop with its own actors,
the learners update in lockstep, and worker i writes into ``out_dir/worker-i``.

One process at a time trains in a directory (a lock); one that holds a run
is resumed from its newest usable checkpoint (``restart=True`` starts over).
A non-finite update is skipped and counted; `Config.max_nonfinite_updates` in
a row stop the run (`NonFiniteUpdates`), as `Config.max_actor_failures`
failures of one actor in a row do (`ActorFailure`), or any other error (the
env of the ``"local"`` actor, a full disk). Ctrl-C (SIGINT) or SIGTERM stops
the loop after the current update; the unrolls the actors had started are
learned on first (`_stop.drain`, waiting at most `_stop.DRAIN_TIMEOUT_S`,
10 s, for them: a loop still waiting for an unroll then is interrupted), then
the curve, a last checkpoint, the policy and the summary are written, as after
an error (each whole or not at all; `tf_vtrace.agent._faults` says what was
kept). A second signal drops the unrolls left; one while the outputs are
written raises KeyboardInterrupt at once.
"""

import os
import signal
import time

from tf_vtrace import export
from tf_vtrace.agent import (
    _faults,
    _loop_stats,
    _run_dir,
    _stop,
    backends,
    envs,
    policy_lag,
    recording,
)
from tf_vtrace.agent import evaluate as evaluate_lib
from tf_vtrace.agent import learner as learner_lib
from tf_vtrace.agent._progress import ProgressBar
from tf_vtrace.agent._schedule import Schedule
from tf_vtrace.agent._update_step import (
    NonFiniteUpdates,
    SkipStreak,
    actor_learner_step,
    actor_learner_steps,
)

__all__ = ["NonFiniteUpdates", "RunDirectoryError", "actor_learner_step",
           "actor_learner_steps", "train"]

RunDirectoryError = _run_dir.RunDirectoryError


class _UpdateLoop:
    """The updates of one run and what they leave in the run directory.

    Built, it restores the newest usable checkpoint of a resumed run (or
    starts at update 0). `run` does the remaining updates until the last
    one, the first Ctrl-C / SIGTERM or a stopping error (`error`), then
    learns on the unrolls the actors had started (`_stop.drain`; not after
    `NonFiniteUpdates`), then (always) closes the progress bar, saves a
    last checkpoint, writes the curve and closes the actors (`_stop`). Its
    numbers for the summary: `tf_vtrace.agent._loop_stats.loop_summary`.
    """

    def __init__(self, config, out_dir, learner, resumed):
        self.config, self.out_dir, self.learner = config, out_dir, learner
        self.resumed = resumed
        self.checkpoints = _run_dir.Checkpoints(
            os.path.join(out_dir, "checkpoints"), model=learner.model,
            optimizer=learner.optimizer)
        self.history = policy_lag.WeightHistory(config.policy_lag)
        self.start, self.counters = (
            _run_dir.restore_loop(self.checkpoints, self.history) if resumed
            else (0, None))
        if self.counters is None:
            self.counters = _run_dir.LoopCounters()
            self.history.push(learner.version, learner.get_weights())
        self.interrupted, self.stop_signal, self.error = False, None, None
        self.evaluation = None  # Set by `run`.
        self.warm_start = self.loop_start = self.loop_end = None
        self.idle = _loop_stats.IdleClock(config)
        self.schedule = Schedule(config, learner.updates_per_call)
        self.skips = SkipStreak(config.max_nonfinite_updates)
        self.calls = 0  # Learner calls in this process (`_update`).
        self.abandoned_unrolls = 0  # Of actors that did not close in time.
        self.started = False  # The loop began (its records opened).
        self.stop = _stop.StopRequest(_stop.DRAIN_TIMEOUT_S)  # `run`'s, there.

    def run(self, actor, progress, evaluation=None):
        """Runs the updates left with `actor` (closed at the end), evaluating
        with `evaluation` (a `TrainingEvaluation`, or None) when it is due."""
        self._open(actor, progress, evaluation)
        config, counters = self.config, self.counters
        with _stop.stop_on_signals(_stop.DRAIN_TIMEOUT_S,
                                   lambda: self.idle.waiting_since) as stop:
            self.stop = stop
            try:
                while counters.updates < config.num_updates:
                    if stop.is_set():
                        raise KeyboardInterrupt
                    self._update()
            except (NonFiniteUpdates, backends.ActorFailure) as error:
                self.error = error
                self.bar.write(_faults.stopping_line(error))
                if isinstance(error, backends.ActorFailure):
                    _stop.drain(self)  # The other actors' unrolls.
            except KeyboardInterrupt as interrupt:
                stop.seen()
                self.interrupted = True
                self.stop_signal = stop.signal_name or "SIGINT"
                if stop.forced:
                    self.error = _faults.hung(interrupt, self.stop_signal,
                                             _stop.DRAIN_TIMEOUT_S)
                self.bar.write(f"interrupted ({self.stop_signal}): learning on "
                               "the unrolls already started, then writing the "
                               "curve, a checkpoint and the policy")
                _stop.drain(self)
            except Exception as error:  # A write that failed, say.
                self.error = error
                self.bar.write(_faults.stopping_line(error))
            finally:
                stop.seen()
                self._close()

    def _open(self, actor, progress, evaluation):
        """Opens the records (cut back to a resumed run's checkpoint) and
        the progress bar; `actor` is closed if the records cannot be."""
        self.actor, self.loop_start = actor, time.time()
        self.evaluation = self.schedule.evaluation = evaluation
        counters = self.counters
        try:
            self.recorder = recording.Recorder(
                self.out_dir, resume=((counters.env_steps, counters.updates)
                                      if self.resumed else None),
                evaluations=evaluation is not None)
        except BaseException:
            actor.close()
            raise
        self.started = True
        self.bar = ProgressBar(self.config, progress, counters, self.resumed)

    def _update(self, stopping=False):
        """The updates of one learner call (`Schedule.call_size`), each
        recorded and shown, then the evaluation and the checkpoint if due
        (not while `stopping`: the last checkpoint follows)."""
        steps = actor_learner_steps(self.actor, self.learner, self.history,
                                    self.idle,
                                    most=self.schedule.call_size(self.counters))
        self.calls += 1
        errors = [self._record_update(unroll, diagnostics)
                  for unroll, diagnostics in steps]
        error = next(filter(None, errors), None)
        if error is not None:
            raise error
        if not stopping:
            self._evaluate_if_due()
        if not stopping and self.schedule.checkpoint_due(self.counters):
            with self.idle.paused(self.actor):
                self._save()

    def _record_update(self, unroll, diagnostics):
        """Counts, records and shows one update; a `NonFiniteUpdates` to
        raise when it ends the run (after the call's other updates are
        recorded), else None."""
        config, counters = self.config, self.counters
        counters.updates += 1
        counters.env_steps += config.steps_per_update
        counters.lags[int(diagnostics["policy_lag"])] += 1
        error = self._count_skipped(diagnostics)
        rates = _loop_stats.rates_since(
            self.loop_start, self.start * config.steps_per_update, self.start,
            counters.env_steps, counters.updates)
        restarts = sum(counters.restarts_per_actor(self.actor))
        self.recorder.record(counters.env_steps, unroll, diagnostics,
                             dict(rates, skipped_updates=counters.skipped,
                                  actor_restarts=restarts))
        self.bar.show(rates, diagnostics, self.recorder, self.evaluation)
        # Warm from here: the first record traces the TensorBoard writer
        # (≈ 0.14 s), a start-up cost like the learner's compile.
        self.warm_start = self.warm_start or (
            time.time(), counters.env_steps, counters.updates)
        self.idle.warm(self.actor)
        return error

    def _evaluate_if_due(self):
        counters = self.counters
        if self.schedule.evaluation_due(counters):
            with self.idle.paused(self.actor):
                returns = self.evaluation.run(counters.env_steps, counters.updates)
            self.recorder.record_evaluation(counters.env_steps,
                                            counters.updates, returns)

    def _count_skipped(self, diagnostics):
        """Counts a skipped update; the `NonFiniteUpdates` that stops the
        run at the `Config.max_nonfinite_updates`-th in a row (else None)."""
        if diagnostics["update_skipped"]:
            self.counters.skipped += 1
        return self.skips.count(diagnostics, self.learner.version)

    def _save(self):
        """Checkpoint number `updates`: weights, optimizer, loop state, after
        what was recorded up to it is on disk."""
        self.recorder.flush()
        _run_dir.save_loop(self.checkpoints, self.counters, self.history,
                           self.actor, self.start)
        self.schedule.checkpoint_saved()
        if self.evaluation is not None:
            self.evaluation.write_best()

    def _close(self):
        """Saves the last checkpoint, closes the records and the actors
        (`_stop.close_actors`: a hung env's thread is left behind, its
        unroll counted as discarded); a step that fails does not keep the
        others from their turn."""
        self.loop_end = time.time()
        self.idle.finish(self.actor)
        self.bar.close()
        for step in (self._save, self.recorder.close, self._close_actors):
            try:
                step()
            except Exception as error:  # A full disk, say.
                self.error = self.error or error

    def _close_actors(self):
        self.abandoned_unrolls = _stop.close_actors(self.actor, self.bar.write)


def train(config, out_dir, progress=True, restart=False):
    """Trains an IMPALA agent; see the module doc for what it writes.

    Args:
      config: A `tf_vtrace.agent.config.Config` (validated when built).
      out_dir: The run directory (created). If it holds a run (a
        ``config.json``), that run is resumed from its newest usable
        checkpoint; its config must be `config`.
      progress: Show a progress bar (env steps/s, learner steps/s, return).
      restart: Remove the outputs of a run in `out_dir` and start over.

    Returns:
      The summary dict (also in ``summary.json``).

    Raises:
      RunDirectoryError: `out_dir` is in use by another process
        (`RunDirectoryLocked`), holds a run with another config, or no
        usable checkpoint (before anything is written).
      NonFiniteUpdates: `Config.max_nonfinite_updates` updates in a row
        were skipped.
      tf_vtrace.agent.backends.ActorFailure: An actor failed
        `Config.max_actor_failures` times in a row (the ``"local"`` one:
        once), or no unroll came in time after a stop signal.
      Any other error of the run (a full disk: `OSError`, TensorFlow's
        `ResourceExhaustedError`). The errors of a run that had begun are
        raised after the newest checkpoint, the policy and the summary
        are written (each whole or not at all); a new run that failed
        before its loop began leaves no outputs.
    """
    # First: MultiWorkerMirroredStrategy must exist before any TF op.
    strategy = learner_lib.make_strategy(config)
    out_dir, worker_index = _run_dir.worker_dir(out_dir, strategy)
    with _run_dir.owned(out_dir):
        resumed = _run_dir.prepare(config, out_dir, restart)
        clock_start = time.time(), time.process_time()
        loop = None
        try:
            observation_space, action_space = envs.env_spaces(config.env_id)
            action_policy = envs.action_policy(action_space)
            learner = learner_lib.Learner(config, observation_space,
                                          action_policy, strategy=strategy)
            loop = _UpdateLoop(config, out_dir, learner, resumed)
            evaluation = None
            if config.eval_every and worker_index == 0:
                evaluation = evaluate_lib.TrainingEvaluation(
                    config, learner.model, action_policy, out_dir,
                    loop.counters.env_steps if resumed else None)
            loop.run(backends.make_actors(config, worker_index=worker_index,
                                          start_update=loop.counters.updates,
                                          prepare=learner.prepare),
                     progress, evaluation)
        except BaseException as error:
            if loop is None or not loop.started:
                _not_started(error, out_dir, resumed)
            raise
        return _finish(loop, action_policy, worker_index, clock_start)


def _not_started(error, out_dir, resumed):
    """A run that failed before its loop began: a new one's outputs are
    removed (so that the corrected command starts afresh there)."""
    if not resumed:
        _run_dir.undo_start(out_dir)
    if isinstance(error, Exception):
        _faults.set_kept(error, (
            f"the run did not resume: {out_dir} holds it as it was" if resumed
            else f"the run did not start: nothing of it is kept in {out_dir}"))


def _finish(loop, action_policy, worker_index, clock_start):
    """Writes the policy and the summary after `loop` has run (each tried
    even if the other fails); returns the summary, or raises the run's
    first error, noting on it what was kept."""
    config, out_dir = loop.config, loop.out_dir
    kept = []
    try:
        _run_dir.write_directory(
            os.path.join(out_dir, "policy"),
            lambda path: export.export_policy(
                loop.learner.model, path,
                metadata={"env_id": config.env_id,
                          "max_episode_steps": config.max_episode_steps},
                **action_policy.export_arguments))
        kept.append("policy/")
    except Exception as error:  # A full disk, say: the last policy stays.
        loop.error = loop.error or error
    try:
        summary = recording.write_summary(config, out_dir, worker_index,
                                          clock_start,
                                          _loop_stats.loop_summary(loop))
        kept.append("summary.json")
    except Exception as error:
        loop.error = loop.error or error
    if loop.error is None:
        return summary
    number = loop.checkpoints.number
    kept.insert(0, "no checkpoint" if number is None
                else f"checkpoint {number} (the newest complete one)")
    lost = [name for name in ("policy/", "summary.json") if name not in kept]
    _faults.set_kept(loop.error, f"kept in {out_dir}: {', '.join(kept)}"
                     + (f"; not written: {', '.join(lost)}" if lost else ""))
    if loop.interrupted:
        loop.error.tf_vtrace_exit_status = 128 + signal.Signals[loop.stop_signal].value
    raise loop.error
