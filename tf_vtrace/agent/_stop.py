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
"""

import contextlib
import signal
import threading
import time

__all__ = ["StopRequest", "call_within", "stop_on_signals"]

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
        stop.set()  # Ends the watch.
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _watch(stop, waiting_since):
    """After a signal: interrupts the main thread (as a second signal does)
    if the loop has not seen it by its deadline and is waiting for the
    actors."""
    stop.wait()
    while not stop._seen.wait(_WATCH_TICK_S):
        if (stop.deadline is not None and time.monotonic() >= stop.deadline
                and waiting_since() is not None):
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
