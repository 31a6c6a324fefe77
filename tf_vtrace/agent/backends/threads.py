"""The ``"thread"`` backend: actors in threads of the learner's process.

`ThreadActors` (the default) runs `Config.num_actors` `LocalActor`s in
threads of this process that act without waiting for the learner: each one
fills a bounded queue (`Config.queue_size` unrolls) with the newest weights
it has, while the learner learns on what is queued.
"""

import contextlib
import threading
import time
import traceback

from tf_vtrace._actor_queue import ActorQueue
from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import envs
from tf_vtrace.agent.backends._common import (
    ActorFailure,
    _check_drain_deadline,
    _FailureCounts,
    actor_seed_offset,
)


class ThreadActors(actor_lib.ActorBackend):
    """`config.num_actors` `LocalActor`s in threads, acting while the learner
    learns (IMPALA's decoupled acting and learning, in one process).

    Each thread loops: take the newest weights handed to `set_weights` (at
    the start of each unroll, as IMPALA's actors do), collect one unroll,
    put it into a queue of `config.queue_size` unrolls (blocking while it is
    full: the actor idles). `collect` takes the oldest queued unroll
    (blocking while it is empty: the learner idles); `collect_queued` the
    next one only if it is queued already, for the learner to update on
    in the same call (`Config.updates_per_call`). The threads share the
    GIL, but the policy's TensorFlow op, the learner's step and most numpy
    work release it.

    The queue and its waits are `tf_vtrace._actor_queue.ActorQueue`, the
    core `tf_vtrace.keras_training.ActorThread` stands on too. The two
    differ beside the queue, each as its consumer needs: here several
    threads read one version-tagged set of weights (a thread sets it on
    its actor when the version has changed), and a failure is queued for
    `collect` like an unroll, since the learner replaces the thread and
    goes on; `ActorThread`'s one thread takes each set published once, and
    its failure ends `fit`'s dataset and is raised when its `with` block
    exits.

    Nothing is lost: the threads act for `config.num_updates` − `start_update`
    unrolls in all (the updates left), so at the end of a run none is left
    over; an unroll whose actor failed is acted again by its replacement.
    At a stop before that (Ctrl-C, an actor failure), `stop_acting` lets the
    threads finish the unrolls they started, for the learner to learn on
    (`pending`). What is queued or being acted at `close` is dropped and
    counted in `discarded_unrolls`.

    A thread whose actor raises is replaced by a new `LocalActor` seeded
    from (seed, learner version) as in `tf_vtrace.agent.actor.actor_seed`;
    `Config.max_actor_failures` failures of one in a row raise
    `ActorFailure` from `collect`.

    `prepare` (the `ActorBackend.prepare` hook, optional): a thread applies
    it to its unroll before queueing it while the learner is behind: while
    at least half the queue is full. The two sides share the interpreter
    lock, so work that either could do is best done by the faster one: with
    a backlog the learner is the slower side and the actor prepares; with
    the queue emptier the learner is waiting, and the unroll goes as it is
    (the learner converts it itself). The queue's depth is the feedback
    that moves this work as the two rates drift within a run. It moves
    ≈ 60 µs of an update's ≈ 2 ms, so it levels small differences only
    (docs/records/scaling.md).

    `idle_seconds()`: the seconds the threads waited in all (on a full
    queue or for the first weights); `unrolls_per_actor`,
    `restarts_per_actor`: as the other backends'.
    """

    def __init__(self, config, worker_index=0, start_update=0, prepare=None):
        self.config, self.worker_index = config, worker_index
        self.prepare = prepare
        self._backlog = max(1, config.queue_size // 2)  # `_learner_behind`
        self.num_actors = config.num_actors
        _, action_space = envs.env_spaces(config.env_id)
        self.action_policy = envs.action_policy(action_space)
        self.head_sizes = getattr(self.action_policy, "head_sizes", None)
        self.version, self._latest = 0, None
        self._have_weights = threading.Event()
        self._queue = ActorQueue(config.queue_size)
        self._lock = threading.Lock()
        self._tickets = max(0, config.num_updates - start_update)
        self._drain_deadline = None  # Set by `stop_acting`.
        self._acting = 0  # Tickets taken and not yet queued.
        self._failures = _FailureCounts(config)
        self.unrolls_per_actor = [0] * self.num_actors
        self._idle_s, self._waiting = 0., {}  # thread id -> wait start
        self.discarded_unrolls = 0
        self._threads = [None] * self.num_actors
        for index in range(self.num_actors):
            self._start(index, start_update)

    @property
    def restarts_per_actor(self):
        return self._failures.restarts

    def _start(self, index, start_update):
        local = actor_lib.LocalActor(
            self.config, actor_seed_offset(self.config, index,
                                           self.worker_index), start_update)
        thread = threading.Thread(target=self._act, args=(index, local),
                                  name=f"tf_vtrace-actor-{index}", daemon=True)
        self._threads[index] = thread
        thread.start()

    def set_weights(self, weights, version):
        """Acts with `weights` (list of numpy arrays) of learner `version`
        from each thread's next unroll on."""
        self._latest, self.version = (int(version), list(weights)), int(version)
        self._have_weights.set()

    def _take_ticket(self):
        with self._lock:
            if (self._tickets == 0 or self._queue.stopped()
                    or self._drain_deadline is not None):
                return False
            self._tickets -= 1
            self._acting += 1  # Until `collect` returns its unroll.
            return True

    def stop_acting(self, timeout_s):
        """The threads finish the unrolls they started and start no more."""
        with self._lock:
            self._drain_deadline = time.monotonic() + timeout_s

    def pending(self):
        """Unrolls started and not yet collected (queued or being acted)."""
        with self._lock:
            return self._acting

    def idle_seconds(self):
        """The seconds the threads have waited so far, summed (the waits in
        progress up to now included)."""
        now = time.perf_counter()
        with self._lock:
            return self._idle_s + sum(now - s for s in self._waiting.values())

    @contextlib.contextmanager
    def _idle(self):
        """Counts the time in the block as this thread's idle time."""
        me = threading.get_ident()
        with self._lock:
            self._waiting[me] = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self._idle_s += time.perf_counter() - self._waiting.pop(me)

    def _put(self, item):
        """Queues `item` (waiting, idle, while the queue is full); False if
        the backend stopped first."""
        with self._idle():
            return self._queue.put(item)

    def _learner_behind(self):
        """Whether at least half the queue is full (`prepare`)."""
        return self._queue.qsize() >= self._backlog

    def _act(self, index, local):
        """The thread of actor `index`: acts until the tickets run out or
        the backend stops; a failure is queued for `collect` to handle."""
        holding = False  # A ticket taken, its unroll not queued yet.
        held = None  # The version of the weights `local` holds.
        try:
            with self._idle():
                if not self._queue.wait(self._have_weights):
                    return
            while self._take_ticket():
                holding = True
                version, weights = self._latest
                if version != held:  # (not local.version: 0 before any)
                    local.set_weights(weights, version)
                    held = version
                unroll = local.collect()
                if self.prepare is not None and self._learner_behind():
                    unroll = self.prepare(unroll)
                holding = False
                if not self._put(("unroll", index, unroll)):
                    return
        except Exception:
            if holding:
                with self._lock:  # Its replacement acts the unroll again.
                    self._tickets += 1
                    self._acting -= 1
            self._put(("error", index, traceback.format_exc()))
        finally:
            local.close()

    def _threads_alive(self):
        return any(thread.is_alive() for thread in self._threads)

    def collect(self):
        """The oldest queued unroll (waits for one)."""
        if self._latest is None:
            raise RuntimeError("set_weights must be called before collect.")
        while True:
            item = self._queue.get(
                self._threads_alive,
                on_tick=lambda: _check_drain_deadline(self._drain_deadline))
            if item is None:  # Never expected: tickets are counted.
                raise ActorFailure(
                    "every actor thread has ended and no unroll is queued "
                    "(more collects than Config.num_updates?)")
            unroll = self._received(item)
            if unroll is not None:
                return unroll

    def collect_queued(self):
        """The oldest queued unroll if one is queued, else None (no wait).
        A failure queued first is put back for `collect` to handle: this
        call comes after `collect` has given the learner an unroll, and
        must not lose it to an `ActorFailure`."""
        if self._latest is None:
            return None
        item = self._queue.get_nowait()
        if item is None:
            return None
        if item[0] != "unroll":
            self._queue.put_back(item)
            return None
        return self._received(item)

    def _received(self, item):
        """The unroll of a queued `item`, counted; None for a failure: its
        thread is replaced (or, past `Config.max_actor_failures`,
        `ActorFailure` raised)."""
        kind, index, payload = item
        if kind == "unroll":
            with self._lock:
                self._acting -= 1
            self.unrolls_per_actor[index] += 1
            self._failures.succeeded(index)
            return payload
        self._threads[index].join()
        if self._drain_deadline is not None:
            return None  # Stopping: its ticket was given back, not acted.
        self._failures.record(index, f"actor thread {index} raised:\n"
                              f"{payload}")
        self._start(index, self.version)
        return None

    def close(self):
        """Stops the threads (each finishes the unroll it is acting) and
        counts the unrolls dropped."""
        self._queue.stop()
        for thread in self._threads:
            if thread is not None:
                thread.join()
        with self._lock:
            self.discarded_unrolls += self._acting
            self._acting = 0
        self._queue.drain()
