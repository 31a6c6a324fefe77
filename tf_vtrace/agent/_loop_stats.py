"""The training loop's numbers for ``summary.json``: idle time, rates, lags.

`IdleClock` measures how long the learner waited for unrolls and the actors
for the learner; `rates_since`, `warm_rates` and `lag_summary` reduce the
loop's counts; `loop_summary` gathers the loop's part of the summary
(`tf_vtrace.agent.recording.write_summary` lists every field).
"""

import contextlib
import time
import traceback

from tf_vtrace.agent import _faults

__all__ = ["IdleClock", "lag_summary", "loop_summary", "rates_since",
           "warm_rates"]


class IdleClock:
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
        # `time.monotonic()` at which the learner began waiting in
        # `collect`, None while it is not (read by `_stop`'s watch).
        self.waiting_since = None
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


def lag_summary(lags):
    """Mean, max and the count per value of the unrolls' policy lags."""
    total = sum(lags.values())
    return {
        "policy_lag_mean": (round(sum(k * n for k, n in lags.items()) / total, 3)
                            if total else None),
        "policy_lag_max": max(lags, default=None),
        "policy_lag_counts": {str(k): lags[k] for k in sorted(lags)},
    }


def rates_since(start, start_steps, start_updates, env_steps, updates):
    """Env and learner steps/s from `start` (a `time.time()`, at env step
    `start_steps` and update `start_updates`) to now."""
    elapsed = time.time() - start
    return {"env_steps_per_s": (env_steps - start_steps) / elapsed,
            "learner_steps_per_s": (updates - start_updates) / elapsed}


def warm_rates(warm_start, end, env_steps, updates):
    """Env and learner steps/s from the end of the first update on (None
    with fewer than two updates)."""
    if warm_start is None or updates <= warm_start[2]:
        return {"env_steps_per_s": None, "learner_steps_per_s": None}
    start, start_steps, start_updates = warm_start
    elapsed = end - start
    return {"env_steps_per_s": round((env_steps - start_steps) / elapsed, 1),
            "learner_steps_per_s": round((updates - start_updates) / elapsed, 2)}


def loop_summary(loop):
    """The loop's part of the summary, from a finished
    `tf_vtrace.agent.train._UpdateLoop` (its counters, clocks, actors,
    recorder and evaluation)."""
    counters = loop.counters
    restarts = counters.restarts_per_actor(loop.actor)
    return {
        "env_steps": counters.env_steps,
        "learner_updates": loop.learner.version,
        "mean_return_last_100": loop.recorder.mean_return,
        "interrupted": loop.interrupted,
        "stop_signal": loop.stop_signal,
        "error": (None if loop.error is None
                  else _faults.describe(loop.error)[0][len("error: "):]),
        "error_traceback": (None if loop.error is None else "".join(
            traceback.format_exception(loop.error))),
        "skipped_updates": counters.skipped,
        "resumed_at_update": loop.start if loop.resumed else None,
        "unrolls_per_actor": counters.unrolls_per_actor(loop.actor, loop.start),
        "actor_restarts": sum(restarts), "restarts_per_actor": restarts,
        "discarded_unrolls": (getattr(loop.actor, "discarded_unrolls", 0)
                              + loop.abandoned_unrolls),
        "updates_per_learner_call": (
            round((counters.updates - loop.start) / loop.calls, 3)
            if loop.calls else None),
        **lag_summary(counters.lags),
        **loop.recorder.behaviour_summary(),
        **warm_rates(loop.warm_start, loop.loop_end, counters.env_steps,
                     counters.updates),
        **loop.idle.fractions(),
        **(loop.evaluation.summary() if loop.evaluation else {}),
    }
