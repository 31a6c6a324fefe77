"""Stopping a run on Ctrl-C (SIGINT) or SIGTERM, within a bound.

The first signal asks the loop to stop after the update in progress
(`StopRequest`); a second raises KeyboardInterrupt. SIGTERM is what a cluster
scheduler sends to preempt a job: it gets the first Ctrl-C's clean stop (the
update in progress finishes, then the curve, a checkpoint, the policy and the
summary are written). Why not let the first KeyboardInterrupt unwind the
loop: raised while the main thread is inside a TensorFlow op, it once left the
runtime hung in the next op (a clean-clone test run, stuck in a variable
assign for 240 s).

A loop that has not seen the request `timeout_s` after it came, because it is
waiting for an unroll that does not come (a hung environment), is
interrupted as by a second signal (`stop_on_signals`' watch): only while it
waits for the actors, never inside a learner step. Off the main thread
(where handlers cannot be set) the request never comes.

A stopping loop then learns on the unrolls the actors had started
(`drain`, within `DRAIN_TIMEOUT_S`) and closes the actors (`close_actors`,
within `CLOSE_TIMEOUT_S`).
"""

import contextlib
import signal
import threading
import time

from tf_vtrace.agent import _faults, backends
from tf_vtrace.agent._update_step import NonFiniteUpdates

__all__ = ["CLOSE_TIMEOUT_S", "DRAIN_TIMEOUT_S", "StopRequest", "call_within",
           "close_actors", "drain", "stop_on_signals"]

# How long a stopping run waits for the unrolls the actors had started
# (`drain`): a CartPole unroll takes milliseconds, an Atari one a fraction
# of a second; a scheduler's grace period after SIGTERM is commonly 30 s,
# and the checkpoint is written after this.
DRAIN_TIMEOUT_S = 10.
# How long closing the actors may take (a hung env's thread cannot end).
CLOSE_TIMEOUT_S = 5.
# How often the watch looks at the loop (seconds).
_WATCH_TICK_S = 0.1


class StopRequest(threading.Event):
    """Set when the run is asked to stop; `signal_name` says by what.

    The loop calls `seen` once it stops (so the watch stands down);
    `seconds_left` is what remains of the `timeout_s` the stop allows for
    the unrolls the actors had started (the whole of it before a signal).
    """

    signal_name = None

    def __init__(self, timeout_s):
        super().__init__()
        self.timeout_s = timeout_s
        self.deadline = None  # `time.monotonic()` by which to have stopped.
        self._seen = threading.Event()
        self._forced = False

    @property
    def forced(self):
        """Whether the watch interrupted the loop's wait for an unroll."""
        return self._forced

    def seen(self):
        self._seen.set()

    def seconds_left(self):
        if self.deadline is None:
            return self.timeout_s
        return max(0., self.deadline - time.monotonic())


@contextlib.contextmanager
def stop_on_signals(timeout_s, waiting_since=lambda: None):
    """A `StopRequest` set by the first Ctrl-C (SIGINT) or SIGTERM; a second
    one of either raises KeyboardInterrupt.

    Args:
      timeout_s: How long after the first signal the loop may go on
        waiting for an unroll before it is interrupted.
      waiting_since: A function giving the `time.monotonic()` at which the
        loop began waiting for the actors, None while it is not waiting.
    """
    stop = StopRequest(timeout_s)
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        if stop.is_set():
            if stop._forced and stop._seen.is_set():
                return  # The watch's, come as the loop stopped: not needed.
            raise KeyboardInterrupt
        stop.signal_name = signal.Signals(signum).name
        stop.deadline = time.monotonic() + timeout_s
        stop.set()

    previous = {signum: signal.signal(signum, handler)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    watch = threading.Thread(target=_watch, args=(stop, waiting_since),
                             name="tf_vtrace-stop-watch", daemon=True)
    watch.start()
    try:
        yield stop
    finally:
        stop.seen()
        stop.set()  # Ends the watch (within a tick), before the handlers go.
        watch.join()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _watch(stop, waiting_since):
    """After a signal: interrupts the main thread (as a second signal does)
    if the loop has not seen it by its deadline and is waiting for the
    actors."""
    stop.wait()
    while not stop._seen.wait(_WATCH_TICK_S):
        if (stop.deadline is not None and time.monotonic() >= stop.deadline
                and waiting_since() is not None and not stop._seen.is_set()):
            stop._forced = True
            signal.pthread_kill(threading.main_thread().ident,
                                signal.Signals[stop.signal_name])
            return


def call_within(function, timeout_s):
    """Calls `function()` in a daemon thread and waits at most `timeout_s`
    for it: True if it returned (its exception raised here), False if it is
    still running (left to run: a thread cannot be stopped)."""
    outcome = []

    def call():
        try:
            function()
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=call, daemon=True,
                              name="tf_vtrace-call-within")
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        return False
    if outcome[0] is not None:
        raise outcome[0]
    return True


def drain(loop):
    """At a stop: learns on the unrolls the actors had started (queued,
    in flight, half acted) with `loop` (the `tf_vtrace.agent.train.
    _UpdateLoop`), so that none of their env steps is lost. They arrive
    within milliseconds; an actor that has not handed its unroll in after
    `DRAIN_TIMEOUT_S`, a failure or a second Ctrl-C ends this, and the
    actors' `close` counts what is left (``discarded_unrolls``). Not in a
    multi-worker run: there every host's learner joins each update's
    all-reduce, and hosts with different numbers of unrolls left would
    wait for each other. An error that ends it becomes the loop's `error`
    if it has none."""
    if loop.config.strategy == "multi_worker":
        return
    loop.actor.stop_acting(loop.stop.seconds_left())
    before = loop.counters.updates
    try:
        while (loop.actor.pending()
               and loop.counters.updates < loop.config.num_updates):
            loop._update(stopping=True)
        if loop.counters.updates > before:
            loop.bar.write(f"learned on the {loop.counters.updates - before}"
                           " unrolls the actors had started")
    except KeyboardInterrupt:
        loop.bar.write("a second signal: the unrolls left are dropped")
    except (NonFiniteUpdates, backends.ActorFailure) as error:
        if loop.interrupted and not loop.stop.seconds_left():
            error = _faults.hung(error, loop.stop_signal, DRAIN_TIMEOUT_S)
        loop.error = loop.error or error
        loop.bar.write("stopped learning on the unrolls left: "
                       f"{_faults.exception_line(error)}")


def close_actors(actor, write):
    """Closes `actor`, waiting at most `CLOSE_TIMEOUT_S` (a hung env's
    thread is left behind, said with `write`); the number of unrolls left
    behind with it (0 if it closed)."""
    if call_within(actor.close, CLOSE_TIMEOUT_S):
        return 0
    abandoned = actor.pending()
    write(f"the actors did not stop within {CLOSE_TIMEOUT_S}"
          " s (a hung environment?): left behind")
    return abandoned
