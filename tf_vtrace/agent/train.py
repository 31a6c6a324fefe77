"""The training loop: actor → unroll → learner, with the policy lag between.

`train(config, out_dir)` runs ``config.num_updates`` updates. Each one hands
the actors the learner weights from ``policy_lag`` updates ago
(`WeightHistory`), takes one unroll of T steps from B envs, and runs one
learner step on it (with the unrolls already queued behind it, up to
``config.updates_per_call`` learner steps in one call, each on its own
unroll: `actor_learner_steps`). With the default ``"thread"`` backend (and
``"process"``, ``"ray"``) the actors act while the learner learns: the
unroll was acted with the weights the actor had at its start, and its
policy lag is measured; with ``"local"`` (``--sync``) the actor acts it
here, then the learner learns (`tf_vtrace.agent.backends`). It writes into
`out_dir`:

* ``config.json``, ``episodes.csv``, ``tensorboard/``, ``learning_curve.png``
  (see `tf_vtrace.agent.recording`);
* ``checkpoints/``: a `tf.train.Checkpoint` of the network, the optimizer
  and the loop's state (counters, the policy-lag weight history) every
  ``config.checkpoint_every_s`` seconds (or ``config.checkpoint_every``
  updates) and at the end, the last two kept;
* ``policy/``: the SavedModel of `tf_vtrace.export.export_policy`;
* with ``config.eval_every``: ``evaluations.csv`` and ``policy_best/``, the
  policy of the best greedy evaluation (`tf_vtrace.agent.evaluate.
  TrainingEvaluation`; the chief only in a multi-worker run);
* ``summary.json``: env steps, updates, wall and process CPU seconds, the
  final mean return (null before the first finished episode: the file is
  strict JSON, with null for any value that is not finite), whether the run
  was interrupted (``stop_signal``) or stopped by an error (``error``), the
  updates skipped because they were non-finite (``skipped_updates``); the
  actor backend and its number of actors, the unrolls each actor gave, the
  measured policy lag (learner version − the unroll's policy version: mean,
  max and a count per value), the loop's env steps/s and learner steps/s after
  the first update (which also compiles the learner step and waits for the
  actors to start), the fractions of that time the learner waited for unrolls
  and the actors for the learner (`_Idle`), the mean updates per learner
  call in this process (``updates_per_learner_call``), the unrolls dropped
  at a stop (``discarded_unrolls``: 0 unless an actor did not hand in its
  unroll in time or a second signal came, see below), and with
  ``config.eval_every``
  the last and best greedy evaluation (``eval_greedy_last``, ``eval_greedy_best``,
  ``eval_best_env_steps``, ``evaluations``, ``eval_s``).

With ``config.strategy`` other than ``"none"`` the learner's strategy is
built first, before any TensorFlow op (``"multi_worker"`` fails otherwise).
In a multi-worker run every host runs this same loop with its own actors
(seeded by its task index, see `tf_vtrace.agent.backends`) and the learners
update in lockstep; the chief (task 0) writes into `out_dir`, worker i into
``out_dir/worker-i``.

`train` on a directory that holds a run resumes it from its newest usable
checkpoint (`tf_vtrace.agent._run_dir`); ``restart=True`` starts over. An
update whose loss or gradient norm is non-finite is skipped (see
`tf_vtrace.agent.learner`) and counted; `Config.max_nonfinite_updates` in a
row stop the run with `NonFiniteUpdates`. An actor that dies is replaced
(`tf_vtrace.agent.backends`); `Config.max_actor_failures` failures of one
in a row stop the run with `ActorFailure`. Either way the checkpoint, the
policy and the summary are written first.

Ctrl-C (SIGINT) or SIGTERM (a scheduler's preemption) stops the loop after
the current update. The unrolls the actors had started by then (queued, in
flight, half acted) are learned on first, so that no env step acted is
lost; an actor that has not handed its unroll in within `_DRAIN_TIMEOUT_S`
(10 s) is given up on. Then the curve, a last checkpoint, the policy and the
summary (``interrupted``, ``stop_signal``) are written. The same happens
after an `ActorFailure` (with the other actors' unrolls). A multi-worker
run stops after the update in progress (its hosts' updates must match). A
second signal while those unrolls are learned on drops the rest; one while
the outputs are written raises KeyboardInterrupt at once.
"""

import collections
import contextlib
import dataclasses
import json
import math
import os
import signal
import threading
import time

from tf_vtrace import export
from tf_vtrace.agent import _run_dir, backends, envs, policy_lag, recording
from tf_vtrace.agent import evaluate as evaluate_lib
from tf_vtrace.agent import learner as learner_lib

__all__ = ["NonFiniteUpdates", "RunDirectoryError", "actor_learner_step",
           "actor_learner_steps", "train"]

RunDirectoryError = _run_dir.RunDirectoryError


# How long a stopping run waits for the unrolls the actors had started
# (`_UpdateLoop._drain`): a CartPole unroll takes milliseconds, an Atari
# one a fraction of a second; a scheduler's grace period after SIGTERM is
# commonly 30 s, and the checkpoint is written after this.
_DRAIN_TIMEOUT_S = 10.


class NonFiniteUpdates(RuntimeError):
    """`Config.max_nonfinite_updates` learner updates in a row were skipped."""


# Diagnostics that are not the update's own numbers (never tested).
_BOOKKEEPING = ("policy_lag", "update_skipped")


def _non_finite(diagnostics):
    """The names of the diagnostics that are NaN or ±inf."""
    return {key for key, value in diagnostics.items()
            if key not in _BOOKKEEPING and not math.isfinite(value)}


def actor_learner_step(actor, learner, history, idle=None):
    """One update: the actor acts with the lagged weights, the learner learns.

    With the synchronous ``"local"`` backend the actor collects the unroll
    here; with the others it was (mostly) acted while the learner learned
    on the ones before, and `collect` only takes it.

    Args:
      actor: An `ActorBackend`.
      learner: A `Learner`.
      history: The `WeightHistory` of the learner's weights (pushed here).
      idle: An `_Idle` to add the time spent in `collect` to (or None).

    Returns:
      `(unroll, diagnostics)`.
    """
    return actor_learner_steps(actor, learner, history, idle)[0]


def actor_learner_steps(actor, learner, history, idle=None, most=1):
    """`actor_learner_step`, with the unrolls already queued behind the
    first (`ActorBackend.collect_queued`, up to `most` in all) learned on
    in the same call (`Learner.update_each`); the actors get the weights
    after the last. Returns a list of `(unroll, diagnostics)`, in order."""
    version, weights = history.lagged()
    if version != actor.version or history.newest_version == 0:
        actor.set_weights(weights, version)
    start = time.perf_counter()
    unrolls = [actor.collect()]
    if idle is not None:
        idle.collect_s += time.perf_counter() - start
    while len(unrolls) < most:
        queued = actor.collect_queued()
        if queued is None:
            break
        unrolls.append(queued)
    updates = learner.update_each(unrolls)
    history.push(updates[-1].version, updates[-1].weights)
    return [(unroll, update.diagnostics)
            for unroll, update in zip(unrolls, updates)]


class _Idle:
    """Seconds the learner waited for unrolls (in `collect`) and the actors
    waited for the learner, from the end of the first update after every
    actor has given an unroll, recorded (`warm`: their start, the first
    compile and the first trace of the TensorBoard writer left out), to the
    end of the loop (`finish`).

    The synchronous ``"local"`` backend's actor idles while the learner
    learns (all but its `collect`); the other backends' actors say how long
    they waited (`idle_seconds`, summed over the actors): the threads on a
    full queue, the processes and Ray actors whenever they were not acting
    an unroll.

    The greedy evaluations and the checkpoints during training (`paused`)
    are left out: their wall time, and the actors' waits meanwhile (the
    learner is not learning then, so a full queue says nothing about how
    acting and learning overlap).
    """

    def __init__(self, config):
        self.config = config
        self.collect_s = 0.
        self.start = self.end = None  # (time, collect_s, actors' idle s)
        self.paused_s, self.paused_actor_idle_s = 0., 0.

    def _now(self, actor):
        actors = getattr(actor, "idle_seconds", None)
        return (time.time(), self.collect_s, actors() if actors else None)

    def warm(self, actor):
        if self.start is None and min(getattr(actor, "unrolls_per_actor", [1])) > 0:
            self.start = self._now(actor)

    def finish(self, actor):
        self.end = self._now(actor)

    @contextlib.contextmanager
    def paused(self, actor):
        """Leaves the time spent in this context (after `warm`) out of the
        fractions."""
        before = self._now(actor)
        try:
            yield
        finally:
            after = self._now(actor)
            if self.start is not None:
                self.paused_s += after[0] - before[0]
                if before[2] is not None:
                    self.paused_actor_idle_s += after[2] - before[2]

    def fractions(self):
        """`learner_idle_fraction`, `actor_idle_fraction` (None without a
        warm update, or where not measured)."""
        fractions = {"learner_idle_fraction": None, "actor_idle_fraction": None}
        wall = None if self.start is None else (
            self.end[0] - self.start[0] - self.paused_s)
        if wall is None or wall <= 0:
            return fractions
        learner = (self.end[1] - self.start[1]) / wall
        fractions["learner_idle_fraction"] = round(learner, 3)
        if self.config.backend == "local":
            fractions["actor_idle_fraction"] = round(1. - learner, 3)
        elif self.end[2] is not None:
            actors_idle_s = self.end[2] - self.start[2] - self.paused_actor_idle_s
            fractions["actor_idle_fraction"] = round(
                actors_idle_s / (wall * self.config.num_actors), 3)
        return fractions


def _worker_index(strategy):
    """This host's task index in a multi-worker cluster (0 otherwise)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return (resolver.task_id or 0) if resolver is not None else 0


def _lag_summary(lags):
    """Mean, max and the count per value of the unrolls' policy lags."""
    total = sum(lags.values())
    return {
        "policy_lag_mean": (round(sum(k * n for k, n in lags.items()) / total, 3)
                            if total else None),
        "policy_lag_max": max(lags, default=None),
        "policy_lag_counts": {str(k): lags[k] for k in sorted(lags)},
    }


def _warm_rates(warm_start, end, env_steps, updates):
    """Env and learner steps/s from the end of the first update on (None
    with fewer than two updates)."""
    if warm_start is None or updates <= warm_start[2]:
        return {"env_steps_per_s": None, "learner_steps_per_s": None}
    start, start_steps, start_updates = warm_start
    elapsed = end - start
    return {"env_steps_per_s": round((env_steps - start_steps) / elapsed, 1),
            "learner_steps_per_s": round((updates - start_updates) / elapsed, 2)}


@contextlib.contextmanager
def _stop_on_signals():
    """A `_StopRequest` set by the first Ctrl-C (SIGINT) or SIGTERM; a second
    one of either raises KeyboardInterrupt.

    SIGTERM is what a cluster scheduler sends to preempt a job: it gets the
    first Ctrl-C's clean stop (the update in progress finishes, then the
    curve, a checkpoint, the policy and the summary are written).
    Why not let the first KeyboardInterrupt unwind the loop: raised while the
    main thread is inside a TensorFlow op, it once left the runtime hung in the
    next op (a clean-clone test run, stuck in a variable assign for 240 s).
    Off the main thread (where handlers cannot be set) the request never
    comes.
    """
    stop = _StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        stop.signal_name = signal.Signals(signum).name
        stop.set()

    previous = {signum: signal.signal(signum, handler)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _StopRequest(threading.Event):
    """Set when the run is asked to stop; `signal_name` says by what."""

    signal_name = None


def _progress_bar(config, enabled, env_steps):
    from tqdm import tqdm
    return tqdm(total=config.num_updates * config.steps_per_update,
                initial=env_steps, unit="step", unit_scale=True,
                disable=not enabled, dynamic_ncols=True, desc=config.env_id)


def _open_run_dir(config, out_dir, strategy, restart):
    """`(run directory, worker index, resumed)`: the directory ready, with
    its ``config.json`` (see `tf_vtrace.agent._run_dir.prepare`); worker i
    of a multi-worker run writes into ``out_dir/worker-i``."""
    worker_index = _worker_index(strategy)
    if worker_index:
        out_dir = os.path.join(out_dir, f"worker-{worker_index}")
    return out_dir, worker_index, _run_dir.prepare(config, out_dir, restart)


@dataclasses.dataclass
class _Counters:
    """What the loop has done, saved in every checkpoint (so a resumed run
    continues them): loop updates (applied and skipped), env steps, skipped
    updates, policy lags, and the unrolls and restarts of each actor in the
    processes before this one."""

    updates: int = 0
    env_steps: int = 0
    skipped: int = 0
    lags: dict = dataclasses.field(default_factory=dict)
    unrolls_before: list = None
    restarts_before: list = None


def _add(before, now):
    """Per-actor counts of the earlier processes plus this one's."""
    return [a + b for a, b in zip(before or [0] * len(now), now)]


class _UpdateLoop:
    """The updates of one run and what they leave in the run directory.

    Built, it restores the newest usable checkpoint of a resumed run (or
    starts at update 0). `run` does the remaining updates until the last
    one, the first Ctrl-C / SIGTERM or a stopping error (`error`), then
    learns on the unrolls the actors had started (`_drain`; not after
    `NonFiniteUpdates`), then (always) closes the progress bar, saves a
    last checkpoint, writes the curve and closes the actors. `stats` are the loop's numbers for the
    summary.
    """

    def __init__(self, config, out_dir, learner, resumed):
        self.config, self.out_dir, self.learner = config, out_dir, learner
        self.resumed = resumed
        self.checkpoints = _run_dir.Checkpoints(
            os.path.join(out_dir, "checkpoints"), model=learner.model,
            optimizer=learner.optimizer)
        self.history = policy_lag.WeightHistory(config.policy_lag)
        self.start, blob = (self.checkpoints.restore_latest() if resumed
                            else (0, None))
        self.counters = _Counters()
        if blob is None:
            self.history.push(learner.version, learner.get_weights())
        else:
            state, kept = _run_dir.decode_state(blob)
            self.counters = _Counters(**state)
            for version, weights in kept:
                self.history.push(version, weights)
        self.lags = collections.Counter(
            {int(k): n for k, n in self.counters.lags.items()})
        self.interrupted, self.stop_signal, self.error = False, None, None
        self.evaluation = None  # Set by `run`.
        self.warm_start = self.loop_start = self.loop_end = None
        self.idle = _Idle(config)
        # `time.monotonic()` when a timed checkpoint is due.
        self.next_checkpoint = time.monotonic() + config.checkpoint_every_s
        # The current streak of skipped updates, and what was non-finite.
        self.streak, self.streak_names = 0, set()
        self.calls = 0  # Learner calls in this process (`_update`).

    def run(self, actor, progress, evaluation=None):
        """Runs the updates left with `actor` (closed at the end), evaluating
        with `evaluation` (a `TrainingEvaluation`, or None) when it is due."""
        self.actor, self.loop_start = actor, time.time()
        self.evaluation = evaluation
        counters = self.counters
        self.recorder = recording.Recorder(
            self.out_dir, resume=((counters.env_steps, counters.updates)
                                  if self.resumed else None),
            evaluations=evaluation is not None)
        self.bar = _progress_bar(self.config, progress, counters.env_steps)
        self.next_postfix = 0.  # `time.monotonic()` of the next postfix.
        if self.resumed:
            self.bar.write(f"resuming at update {counters.updates} "
                           f"(env step {counters.env_steps})")
        if self.config.checkpoint_every is None and self.config.checkpoint_updates:
            self.bar.write(f"checkpoints every {self.config.checkpoint_updates}"
                           " updates (--checkpoint-every), not by time: a "
                           "multi-worker run's hosts must checkpoint at the "
                           "same update")
        with _stop_on_signals() as stop:
            try:
                while counters.updates < self.config.num_updates:
                    if stop.is_set():
                        raise KeyboardInterrupt
                    self._update()
            except (NonFiniteUpdates, backends.ActorFailure) as error:
                self.error = error
                self.bar.write(f"stopped: {error}")
                if isinstance(error, backends.ActorFailure):
                    self._drain()  # The other actors' unrolls.
            except KeyboardInterrupt:
                self.interrupted = True
                self.stop_signal = stop.signal_name or "SIGINT"
                self.bar.write(f"interrupted ({self.stop_signal}): learning on "
                               "the unrolls already started, then writing the "
                               "curve, a checkpoint and the policy")
                self._drain()
            finally:
                self._close()

    def _drain(self):
        """At a stop: learns on the unrolls the actors had started (queued,
        in flight, half acted), so that none of their env steps is lost.
        They arrive within milliseconds; an actor that has not handed its
        unroll in after `_DRAIN_TIMEOUT_S`, a failure or a second Ctrl-C
        ends this, and the actors' `close` counts what is left
        (``discarded_unrolls``). Not in a multi-worker run: there every
        host's learner joins each update's all-reduce, and hosts with
        different numbers of unrolls left would wait for each other."""
        if self.config.strategy == "multi_worker":
            return
        self.actor.stop_acting(_DRAIN_TIMEOUT_S)
        before = self.counters.updates
        try:
            while (self.actor.pending()
                   and self.counters.updates < self.config.num_updates):
                self._update(stopping=True)
            if self.counters.updates > before:
                self.bar.write(f"learned on the {self.counters.updates - before}"
                               " unrolls the actors had started")
        except KeyboardInterrupt:
            self.bar.write("a second signal: the unrolls left are dropped")
        except (NonFiniteUpdates, backends.ActorFailure) as error:
            self.error = self.error or error
            self.bar.write(f"stopped learning on the unrolls left: {error}")

    def _update(self, stopping=False):
        """The updates of one learner call (`_call_size`), each recorded and
        shown, then the evaluation and the checkpoint if due (not while
        `stopping`: the last checkpoint follows)."""
        steps = actor_learner_steps(self.actor, self.learner, self.history,
                                    self.idle, most=self._call_size())
        self.calls += 1
        errors = [self._book(unroll, diagnostics)
                  for unroll, diagnostics in steps]
        error = next(filter(None, errors), None)
        if error is not None:
            raise error
        if not stopping:
            self._evaluate_if_due()
        if not stopping and self._checkpoint_due():
            with self.idle.paused(self.actor):
                self._save()

    def _book(self, unroll, diagnostics):
        """Counts, records and shows one update; a `NonFiniteUpdates` to
        raise when it ends the run (after the call's other updates are
        booked), else None."""
        config, counters = self.config, self.counters
        counters.updates += 1
        counters.env_steps += config.steps_per_update
        self.lags[int(diagnostics["policy_lag"])] += 1
        error = self._count_skipped(diagnostics)
        elapsed = time.time() - self.loop_start
        rates = {"env_steps_per_s": (counters.env_steps - self.start_steps)
                 / elapsed,
                 "learner_steps_per_s": (counters.updates - self.start)
                 / elapsed}
        self.recorder.record(counters.env_steps, unroll, diagnostics,
                             dict(rates, skipped_updates=counters.skipped,
                                  actor_restarts=sum(self._restarts())))
        self._show(rates, diagnostics)
        # Warm from here: the first record traces the TensorBoard writer
        # (≈ 0.14 s), a start-up cost like the learner's compile.
        self.warm_start = self.warm_start or (
            time.time(), counters.env_steps, counters.updates)
        self.idle.warm(self.actor)
        return error

    def _call_size(self):
        """The most updates the next learner call may make: up to
        `Learner.updates_per_call`, ending at the first one that the run's
        end, an evaluation or a checkpoint by update count follows (so
        that they come where one update per call puts them)."""
        most = 1
        while (most < self.learner.updates_per_call
               and not self._due_after(most)):
            most += 1
        return most

    def _due_after(self, ahead):
        """Whether the run's end, an evaluation or a checkpoint by update
        count follows the update `ahead` updates from now."""
        config, counters = self.config, self.counters
        updates = counters.updates + ahead
        return (updates >= config.num_updates
                or self._counted_checkpoint_at(updates)
                or (self.evaluation is not None and self.evaluation.due(
                    counters.env_steps + ahead * config.steps_per_update,
                    False)))

    def _checkpoint_due(self):
        """Every `Config.checkpoint_updates` updates, or where that is None
        `Config.checkpoint_every_s` seconds after the last checkpoint."""
        if self.config.checkpoint_updates is not None:
            return self._counted_checkpoint_at(self.counters.updates)
        return time.monotonic() >= self.next_checkpoint

    def _counted_checkpoint_at(self, updates):
        """Whether a checkpoint by update count is due after `updates`."""
        every = self.config.checkpoint_updates
        return every is not None and updates % every == 0

    def _show(self, rates, diagnostics):
        """Advances the progress bar; its numbers are set at most once per
        redraw interval (formatting them at every update cost the learner
        thread, the pipeline's slower side, ≈30 µs)."""
        self.bar.update(self.config.steps_per_update)
        now = time.monotonic()
        if self.bar.disable or now < self.next_postfix:
            return
        self.next_postfix = now + self.bar.mininterval
        postfix = {"env/s": f"{rates['env_steps_per_s']:.0f}",
                   "learn/s": f"{rates['learner_steps_per_s']:.1f}",
                   "lag": f"{diagnostics['policy_lag']:.0f}",
                   "return": f"{self.recorder.mean_return:.1f}"}
        if self.evaluation is not None and self.evaluation.last_return is not None:
            postfix["greedy"] = f"{self.evaluation.last_return:.1f}"
        self.bar.set_postfix(postfix, refresh=False)

    def _evaluate_if_due(self):
        counters = self.counters
        if self.evaluation is not None and self.evaluation.due(
                counters.env_steps, counters.updates == self.config.num_updates):
            with self.idle.paused(self.actor):
                returns = self.evaluation.run(counters.env_steps, counters.updates)
            self.recorder.record_evaluation(counters.env_steps,
                                            counters.updates, returns)

    @property
    def start_steps(self):
        return self.start * self.config.steps_per_update

    def _count_skipped(self, diagnostics):
        """Counts a skipped update; the `NonFiniteUpdates` that stops the
        run at the `Config.max_nonfinite_updates`-th in a row (else None)."""
        if not diagnostics["update_skipped"]:
            self.streak, self.streak_names = 0, set()
            return None
        self.counters.skipped += 1
        self.streak += 1
        self.streak_names |= _non_finite(diagnostics)
        if self.streak < self.config.max_nonfinite_updates:
            return None
        return NonFiniteUpdates(
            f"{self.streak} learner updates in a row were skipped "
            f"(Config.max_nonfinite_updates={self.config.max_nonfinite_updates}):"
            f" non-finite {', '.join(sorted(self.streak_names))}. The "
            f"weights are those of learner update {self.learner.version}.")

    def _unrolls(self):
        return _add(self.counters.unrolls_before,
                    list(getattr(self.actor, "unrolls_per_actor",
                                 [self.counters.updates - self.start])))

    def _restarts(self):
        return _add(self.counters.restarts_before,
                    list(getattr(self.actor, "restarts_per_actor", [0])))

    def _save(self):
        """Checkpoint number `updates`: weights, optimizer, loop state, after
        what was recorded up to it is on disk."""
        self.recorder.flush()
        state = dataclasses.asdict(self.counters)
        state.update(lags={str(k): n for k, n in self.lags.items()},
                     unrolls_before=self._unrolls(),
                     restarts_before=self._restarts())
        self.checkpoints.save(
            self.counters.updates,
            _run_dir.encode_state(state, self.history.kept()))
        self.next_checkpoint = time.monotonic() + self.config.checkpoint_every_s
        if self.evaluation is not None:
            self.evaluation.write_best()

    def _close(self):
        self.loop_end = time.time()
        self.idle.finish(self.actor)
        self.bar.close()
        self._save()
        self.recorder.close()
        self.actor.close()

    def stats(self):
        """The loop's part of the summary."""
        counters, restarts = self.counters, self._restarts()
        return {
            "env_steps": counters.env_steps,
            "learner_updates": self.learner.version,
            "mean_return_last_100": self.recorder.mean_return,
            "interrupted": self.interrupted,
            "stop_signal": self.stop_signal,
            "error": None if self.error is None else str(self.error),
            "skipped_updates": counters.skipped,
            "resumed_at_update": self.start if self.resumed else None,
            "unrolls_per_actor": self._unrolls(),
            "actor_restarts": sum(restarts), "restarts_per_actor": restarts,
            "discarded_unrolls": getattr(self.actor, "discarded_unrolls", 0),
            "updates_per_learner_call": (
                round((counters.updates - self.start) / self.calls, 3)
                if self.calls else None),
            **_lag_summary(self.lags),
            **_warm_rates(self.warm_start, self.loop_end, counters.env_steps,
                          counters.updates),
            **self.idle.fractions(),
            **(self.evaluation.summary() if self.evaluation else {}),
        }


def _write_summary(config, out_dir, worker_index, clock_start, loop_stats):
    """Writes ``summary.json`` (see the module doc) and returns it."""
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
      RunDirectoryError: `out_dir` holds a run with another config, or no
        usable checkpoint (before anything is written).
      NonFiniteUpdates: `Config.max_nonfinite_updates` updates in a row
        were skipped.
      tf_vtrace.agent.backends.ActorFailure: An actor failed
        `Config.max_actor_failures` times in a row.
      The last two after the checkpoint, the policy and the summary are
      written.
    """
    # First: MultiWorkerMirroredStrategy must exist before any TF op.
    strategy = learner_lib.make_strategy(config)
    out_dir, worker_index, resumed = _open_run_dir(config, out_dir, strategy,
                                                   restart)
    clock_start = time.time(), time.process_time()
    observation_space, action_space = envs.env_spaces(config.env_id)
    head_sizes = envs.head_sizes(action_space)
    learner = learner_lib.Learner(config, observation_space, head_sizes,
                                  strategy=strategy)
    loop = _UpdateLoop(config, out_dir, learner, resumed)
    evaluation = None
    if config.eval_every and worker_index == 0:
        evaluation = evaluate_lib.TrainingEvaluation(
            config, learner.model, head_sizes, out_dir,
            loop.counters.env_steps if resumed else None)
    loop.run(backends.make_actors(config, worker_index=worker_index,
                                  start_update=loop.counters.updates,
                                  prepare=learner.prepare),
             progress, evaluation)
    export.export_policy(
        learner.model, os.path.join(out_dir, "policy"), head_sizes,
        metadata={"env_id": config.env_id,
                  "max_episode_steps": config.max_episode_steps})
    summary = _write_summary(config, out_dir, worker_index, clock_start,
                             loop.stats())
    if loop.error is not None:
        raise loop.error
    return summary
