"""Actor backends: where the actors run, behind one contract.

Every backend is an `tf_vtrace.agent.actor.ActorBackend`: ``set_weights(weights,
version)`` with a list of numpy arrays, ``collect()`` returning one unroll
dict with `tf_vtrace.agent.actor.UNROLL_KEYS`, ``close()``. Four backends,
chosen by `Config.backend` (`make_actors`):

* ``"thread"``: `ThreadActors` (the default), `Config.num_actors`
  `LocalActor`s in threads of this process that act without waiting for the
  learner: each one fills a bounded queue (`Config.queue_size` unrolls) with
  the newest weights it has, while the learner learns on what is queued;
* ``"local"``: one `LocalActor` in this process, called by the learner: the
  synchronous loop (collect, then learn), for reproducible experiments and
  the artificial `Config.policy_lag`;
* ``"process"``: `ProcessActors`, `Config.num_actors` worker processes of the
  standard library's `multiprocessing` (spawn start method, so TensorFlow is
  never forked), each running a `LocalActor`; weights and unrolls travel over
  pipes as numpy arrays;
* ``"ray"``: `RayActors`, one Ray actor per `LocalActor` (the `ray` extra;
  Ray is imported only when this backend is built).

With several actors each one always has an unroll in flight: `collect`
returns the one that has been ready longest (so no actor starves, see
`_AsyncActors`) and at once asks that actor for its next unroll,
with the newest weights handed to `set_weights` (IMPALA's actors fetch the
parameters at the start of each unroll). ``collect_queued()`` takes an
unroll only if one is ready already (queued by a thread, or finished by a
process or Ray actor), never waiting: the learner updates on it in the same
call (`Config.updates_per_call`). While the learner learns on one
unroll the actors keep acting with older weights, so the unrolls lag behind
the learner; each one carries the ``policy_version`` it was acted with, and
`Learner.step` reports the lag of every unroll (learner version − that
version).

Every backend acts the unrolls the run has updates left for and no more, so
a finished run leaves none behind. At a stop before that (Ctrl-C, an actor
failure) the training loop calls ``stop_acting``: no unroll is started any
more, and ``collect`` returns those already started (``pending``) for the
learner to learn on; what is left at ``close`` is counted in
``discarded_unrolls``.

An actor that dies (its process killed, `ray.kill`) or raises is replaced
by a new one, seeded from (seed, learner version) as in
`tf_vtrace.agent.actor.actor_seed`, that acts with the newest weights; the
restarts are counted in ``restarts_per_actor``. At the
`Config.max_actor_failures`-th failure of one actor in a row, `collect`
raises `ActorFailure` with the actor's index and how it last ended (its
traceback, or its exit code).

Actor i of this host steps envs seeded from ``config.seed + offset`` with
offset = (host index · num_actors + i) · num_envs, so no two envs share a
seed, and actor 0 of host 0 is the same as the ``"local"`` backend.
"""

import abc
import collections
import multiprocessing
import multiprocessing.connection
import os
import queue
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import weakref

from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import envs

__all__ = ["ActorFailure", "ProcessActors", "RayActors", "ThreadActors",
           "actor_seed_offset", "make_actors"]


class ActorFailure(RuntimeError):
    """An actor died or failed `Config.max_actor_failures` times in a row."""

# A worker that does not exit on its own within this many seconds of `close`
# is killed.
_JOIN_TIMEOUT_S = 5.


def actor_seed_offset(config, actor_index, worker_index=0):
    """The `LocalActor` seed offset of actor `actor_index` on host `worker_index`.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      actor_index: 0 … num_actors − 1.
      worker_index: The host's index in a multi-worker run (0 otherwise).

    Returns:
      An int: (worker_index · num_actors + actor_index) · num_envs.

    Examples:
      >>> from tf_vtrace.agent.config import Config
      >>> actor_seed_offset(Config(num_envs=4, num_actors=2, backend="process"), 1)
      4
    """
    return (worker_index * config.num_actors + actor_index) * config.num_envs


def make_actors(config, worker_index=0, start_update=0, prepare=None):
    """The backend `config.backend` with `config.num_actors` actors.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      worker_index: This host's index in a multi-worker run (seeds, see the
        module doc).
      start_update: The learner update the run starts at (a resumed run's;
        seeds, see `tf_vtrace.agent.actor.actor_seed`).
      prepare: None, or a function of an unroll returning the unroll to
        queue instead (`Learner.prepare`), called by the ``"thread"``
        backend's actor threads, off the learner's thread, while the
        learner is behind (`ThreadActors`). The other backends return
        their unrolls as acted.

    Returns:
      An `ActorBackend` with ``head_sizes`` and ``version`` attributes.
    """
    if config.backend == "local":
        return actor_lib.LocalActor(
            config, seed_offset=actor_seed_offset(config, 0, worker_index),
            start_update=start_update)
    backend = {"thread": ThreadActors, "process": ProcessActors,
               "ray": RayActors}[config.backend]
    if backend is ThreadActors:
        return backend(config, worker_index, start_update, prepare)
    return backend(config, worker_index=worker_index, start_update=start_update)


class _Failures:
    """Failures in a row of each actor: `record` raises `ActorFailure` at
    the `Config.max_actor_failures`-th, else says the actor is replaced."""

    def __init__(self, config):
        self.limit = config.max_actor_failures
        self.in_a_row = [0] * config.num_actors
        self.restarts = [0] * config.num_actors

    def succeeded(self, index):
        self.in_a_row[index] = 0

    def record(self, index, failure):
        self.in_a_row[index] += 1
        if self.in_a_row[index] >= self.limit:
            raise ActorFailure(
                f"actor {index} failed {self.in_a_row[index]} times in a row "
                f"(Config.max_actor_failures={self.limit}); the last "
                f"time:\n{failure}")
        print(f"actor {index} failed, starting a new one: {failure}",
              file=sys.stderr)
        self.restarts[index] += 1


# How often a blocked actor thread or the learner's wait looks at the stop
# flag and the threads' health (seconds).
_TICK_S = 0.1
# How often a stopping learner polls the remote actors for the unrolls in
# flight (seconds).
_POLL_S = 0.005


def _check_drain_deadline(deadline):
    """Raises `ActorFailure` once `deadline` (`stop_acting`'s) has passed."""
    if deadline is not None and time.monotonic() > deadline:
        raise ActorFailure("the actors did not hand in the unrolls they had "
                           "started within the time allowed after the stop")


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

    `prepare` (optional): a function a thread applies to its unroll before
    queueing it while the learner is behind (`make_actors`): while at least
    half the queue is full. The two sides share the interpreter lock, so
    work that either could do is best done by the faster one: with a
    backlog the learner is the slower side and the actor prepares; with
    the queue emptier the learner is waiting, and the unroll goes as it
    is (the learner converts it itself). The queue's depth is the feedback
    that moves this work as the two rates drift within a run. It moves
    ≈ 60 µs of an update's ≈ 2 ms, so it levels small differences only:
    in the bench's command both sides waited ≤ 10 % of the time in 19
    runs of 22 this way, 17 of 22 with the actor always preparing
    (docs/records/scaling.md).

    `idle_seconds()`: the seconds the threads waited in all (on a full
    queue or for the first weights); `unrolls_per_actor`, `restarts_per_actor`: as the
    other backends'.
    """

    def __init__(self, config, worker_index=0, start_update=0, prepare=None):
        self.config, self.worker_index = config, worker_index
        self._prepare = prepare or (lambda unroll: unroll)
        self._backlog = max(1, config.queue_size // 2)  # `_learner_behind`
        self.num_actors = config.num_actors
        _, action_space = envs.env_spaces(config.env_id)
        self.head_sizes = envs.head_sizes(action_space)
        self.version, self._latest = 0, None
        self._have_weights = threading.Event()
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=config.queue_size)
        self._put_aside = None  # A failure `collect_queued` took (`_get`).
        self._lock = threading.Lock()
        self._tickets = max(0, config.num_updates - start_update)
        self._drain_deadline = None  # Set by `stop_acting`.
        self._acting = 0  # Tickets taken and not yet queued.
        self._failures = _Failures(config)
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
            if (self._tickets == 0 or self._stop.is_set()
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

    def _wait(self, event_or_put):
        """Runs `event_or_put` (True when done) every tick until it is done
        or the backend stops, counted as idle. False: stopped."""
        me = threading.get_ident()
        with self._lock:
            self._waiting[me] = time.perf_counter()
        try:
            while not self._stop.is_set():
                if event_or_put():
                    return True
            return False
        finally:
            with self._lock:
                self._idle_s += time.perf_counter() - self._waiting.pop(me)

    def _put(self, item):
        def put():
            try:
                self._queue.put(item, timeout=_TICK_S)
                return True
            except queue.Full:
                return False
        return self._wait(put)

    def _learner_behind(self):
        """Whether at least half the queue is full (`prepare`)."""
        return self._queue.qsize() >= self._backlog

    def _act(self, index, local):
        """The thread of actor `index`: acts until the tickets run out or
        the backend stops; a failure is queued for `collect` to handle."""
        holding = False  # A ticket taken, its unroll not queued yet.
        held = None  # The version of the weights `local` holds.
        try:
            if not self._wait(lambda: self._have_weights.wait(_TICK_S)):
                return
            while self._take_ticket():
                holding = True
                version, weights = self._latest
                if version != held:  # (not local.version: 0 before any)
                    local.set_weights(weights, version)
                    held = version
                unroll = local.collect()
                if self._learner_behind():
                    unroll = self._prepare(unroll)
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

    def _get(self):
        """The next queued item (one `collect_queued` put aside first); an
        `ActorFailure` if every thread has ended with nothing queued (never
        expected: tickets are counted)."""
        if self._put_aside is not None:
            item, self._put_aside = self._put_aside, None
            return item
        while True:
            try:
                return self._queue.get(timeout=_TICK_S)
            except queue.Empty:
                if not any(t.is_alive() for t in self._threads):
                    raise ActorFailure(
                        "every actor thread has ended and no unroll is "
                        "queued (more collects than Config.num_updates?)"
                    ) from None
                _check_drain_deadline(self._drain_deadline)

    def collect(self):
        """The oldest queued unroll (waits for one)."""
        if self._latest is None:
            raise RuntimeError("set_weights must be called before collect.")
        while True:
            unroll = self._received(self._get())
            if unroll is not None:
                return unroll

    def collect_queued(self):
        """The oldest queued unroll if one is queued, else None (no wait).
        A failure queued first is put aside for `collect` to handle: this
        call comes after `collect` has given the learner an unroll, and
        must not lose it to an `ActorFailure`."""
        if self._latest is None or self._put_aside is not None:
            return None
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return None
        if item[0] != "unroll":
            self._put_aside = item
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
        self._stop.set()
        for thread in self._threads:
            if thread is not None:
                thread.join()
        with self._lock:
            self.discarded_unrolls += self._acting
            self._acting = 0
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break


class _RemoteActor:
    """A `LocalActor` in a worker process: one call, weights in, unroll out.

    TensorFlow is set up for a small policy network beside other actors: one
    thread per op pool and no GPU (the learner keeps the accelerators).
    """

    def __init__(self, config, seed_offset, start_update=0):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        try:
            tf.config.set_visible_devices([], "GPU")
            tf.config.threading.set_intra_op_parallelism_threads(1)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # TensorFlow already initialized in this process.
            pass
        self._actor = actor_lib.LocalActor(config, seed_offset=seed_offset,
                                           start_update=start_update)

    def unroll(self, weights, version):
        """Sets `weights` (unless None) of `version`; returns one unroll and
        the seconds it took to act (setting the weights included)."""
        start = time.perf_counter()
        if weights is not None:
            self._actor.set_weights(weights, version)
        return self._actor.collect(), time.perf_counter() - start

    def close(self):
        self._actor.close()


class _AsyncActors(actor_lib.ActorBackend):
    """N remote actors with one unroll in flight each (see the module doc).

    Subclasses start the actors and implement `_submit` (ask actor i for an
    unroll, with new weights or None), `_poll` (which in-flight actors have
    finished) and `_receive` (actor i's finished unroll).

    Fairness: `collect` returns the unroll that has been ready longest. The
    actors found finished by each poll queue up behind those found earlier;
    the ones found by the same poll in the order they were asked. An actor
    whose unroll is ready is therefore served within `num_actors` − 1
    collects, however fast the others are (taking, say, the lowest-numbered
    ready actor would starve the rest whenever the learner is the slower
    side). `collect_queued` takes from the same order, without waiting: the
    unrolls already ready, for the learner's same call.
    `unrolls_per_actor` counts what each actor gave.

    The actors are asked for `config.num_updates` − `start_update` unrolls
    in all (the updates left; one more for each that failed), so at the end
    of a run none is in flight. At a stop before that, `stop_acting` asks
    for no more and lets `collect` take the unrolls in flight (`pending`);
    those still in flight at `close` are counted in `discarded_unrolls`.
    """

    def __init__(self, config, worker_index, start_update):
        self.config = config
        self.worker_index = worker_index
        self.num_actors = config.num_actors
        _, action_space = envs.env_spaces(config.env_id)
        self.head_sizes = envs.head_sizes(action_space)
        self.version = 0
        self.unrolls_per_actor = [0] * self.num_actors
        self._failures = _Failures(config)
        self._weights = None
        self._held_versions = [None] * self.num_actors
        # Actor index -> request number, for the actors with an unroll in
        # flight; the ready ones, oldest first.
        self._in_flight = {}
        self._requests = 0
        self._requests_left = max(0, config.num_updates - start_update)
        self._drain_deadline = None  # Set by `stop_acting`.
        self.discarded_unrolls = 0
        self._ready = collections.deque()
        # An actor `collect_queued` found failed: `collect` replaces it.
        self._to_replace = None
        self._acting_s, self._started = 0., time.perf_counter()

    @property
    def restarts_per_actor(self):
        return self._failures.restarts

    @abc.abstractmethod
    def _submit(self, index, weights, version):
        """Asks actor `index` for an unroll; `weights` None: keep its own."""

    @abc.abstractmethod
    def _poll(self, indices, block):
        """The actors among `indices` whose unroll is ready; `block`: wait
        until at least one is."""

    @abc.abstractmethod
    def _receive(self, index):
        """The finished unroll of actor `index` and the seconds it took to
        act (`_RemoteActor.unroll`); `_ActorDied` with the actor's
        traceback or exit status if it failed."""

    @abc.abstractmethod
    def _start(self, index, start_update):
        """Starts actor `index` (seeded for `start_update`), replacing a
        failed one."""

    def _seed_offset(self, index):
        return actor_seed_offset(self.config, index, self.worker_index)

    def _request(self, index):
        if self._requests_left == 0 or self._drain_deadline is not None:
            return
        self._requests_left -= 1
        fresh = self._held_versions[index] != self.version
        self._submit(index, self._weights if fresh else None, self.version)
        self._held_versions[index] = self.version
        self._in_flight[index] = self._requests
        self._requests += 1

    def _queue_ready(self, wait=True):
        """Appends the newly finished actors to the ready queue, oldest
        request first; with `wait`, waits for one if the queue is empty."""
        waiting = [i for i in self._in_flight if i not in self._ready]
        if not waiting:
            if not self._ready and wait:
                raise ActorFailure(
                    "no unroll is left in flight" if self._drain_deadline
                    else "no unroll is in flight (more collects than "
                    "Config.num_updates?)")
            return
        stopping = self._drain_deadline is not None
        ready = self._poll(
            waiting, block=wait and not self._ready and not stopping)
        while wait and not ready and not self._ready:  # Stopping: bounded.
            _check_drain_deadline(self._drain_deadline)
            time.sleep(_POLL_S)
            ready = self._poll(waiting, block=False)
        self._ready.extend(sorted(ready, key=self._in_flight.__getitem__))

    def stop_acting(self, timeout_s):
        """Asks for no more unrolls; those in flight can still be collected."""
        self._drain_deadline = time.monotonic() + timeout_s

    def pending(self):
        """Unrolls asked for and not yet collected."""
        return len(self._in_flight)

    def _count_discarded(self):
        """At `close`: the unrolls in flight are dropped."""
        self.discarded_unrolls += len(self._in_flight)
        self._in_flight.clear()

    def set_weights(self, weights, version):
        """Acts with `weights` (list of numpy arrays) of learner `version`
        from each actor's next unroll on."""
        self._weights, self.version = list(weights), int(version)

    def idle_seconds(self):
        """The seconds the actors have not been acting since this backend
        started, summed over the actors: the wall time of each less the
        seconds its unrolls took to act (their start, pickling and sending,
        and the waits for the learner's next request). An unroll counts when
        it arrives, so across an interval the count is off by at most the
        unrolls in flight at its ends (one per actor)."""
        wall_s = time.perf_counter() - self._started
        return wall_s * self.num_actors - self._acting_s

    def collect(self):
        """The unroll ready longest; its actor starts the next one at once."""
        if self._weights is None:
            raise RuntimeError("set_weights must be called before collect.")
        if self._to_replace is not None:
            index, failure = self._to_replace
            self._to_replace = None
            if self._drain_deadline is None:
                self._replace(index, failure)
        for index in range(self.num_actors):
            if index not in self._in_flight:
                self._request(index)
        while True:
            self._queue_ready()
            unroll = self._take(self._ready.popleft())
            if unroll is not None:
                return unroll

    def collect_queued(self):
        """The unroll ready longest if one is ready now, else None (no
        wait); its actor starts the next one at once. A failed actor found
        here is replaced at the next `collect`: this call comes after
        `collect` has given the learner an unroll, and must not lose it to
        an `ActorFailure`."""
        if self._weights is None or self._to_replace is not None:
            return None
        self._queue_ready(wait=False)
        while self._ready and self._to_replace is None:
            unroll = self._take(self._ready.popleft(), defer_replace=True)
            if unroll is not None:
                return unroll
        return None

    def _take(self, index, defer_replace=False):
        """Actor `index`'s finished unroll, counted, and its next one asked
        for; None if the actor failed: it is replaced (now, or at the next
        `collect` with `defer_replace`; not while stopping)."""
        try:
            unroll, acting_s = self._receive(index)
        except _ActorDied as failure:
            del self._in_flight[index]
            self._requests_left += 1  # Its unroll is to be acted again.
            if defer_replace:
                self._to_replace = (index, failure)
            elif self._drain_deadline is None:
                self._replace(index, failure)
            return None
        del self._in_flight[index]
        self._acting_s += acting_s
        self.unrolls_per_actor[index] += 1
        self._failures.succeeded(index)
        self._request(index)
        return unroll

    def _replace(self, index, failure):
        """Starts a new actor `index` with the current weights, or raises
        `ActorFailure` at its `Config.max_actor_failures`-th failure in a
        row."""
        self._failures.record(index, failure)
        self._start(index, self.version)
        self._held_versions[index] = None
        self._request(index)


class _ActorDied(Exception):
    """One actor's failure: its traceback or how its process ended."""


class ProcessActors(_AsyncActors):
    """`config.num_actors` `LocalActor`s in worker processes (stdlib).

    Workers are started with the spawn method (a fresh interpreter: forking a
    process that runs TensorFlow is unsafe), ignore Ctrl-C and SIGTERM (the
    training loop handles them and calls `close`), and exit when the pipe to this process
    closes, so they do not outlive it. A worker that dies or raises is
    replaced (see `_AsyncActors`).

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      worker_index: This host's index in a multi-worker run.
    """

    def __init__(self, config, worker_index=0, start_update=0):
        super().__init__(config, worker_index, start_update)
        self._context = multiprocessing.get_context("spawn")
        self._connections = [None] * self.num_actors
        self._processes = [None] * self.num_actors
        # Runs at `close`, at garbage collection or at interpreter exit (it
        # reads the lists when it runs: replaced workers are stopped too).
        self._finalizer = weakref.finalize(
            self, _stop_processes, self._connections, self._processes)
        for index in range(self.num_actors):
            self._start(index, start_update)

    def _start(self, index, start_update):
        if self._processes[index] is not None:  # A failed worker: end it.
            _stop_processes([self._connections[index]],
                            [self._processes[index]])
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(
            target=_process_worker, daemon=True,
            name=f"tf_vtrace-actor-{index}",
            args=(child_end, self.config, self._seed_offset(index),
                  start_update))
        process.start()
        child_end.close()
        self._connections[index], self._processes[index] = parent_end, process

    def _submit(self, index, weights, version):
        try:
            self._connections[index].send((weights, version))
        except OSError:
            pass  # A dead worker: its pipe reads as closed at `_receive`.

    def _poll(self, indices, block):
        connections = [self._connections[i] for i in indices]
        while True:
            ready = multiprocessing.connection.wait(
                connections, timeout=1. if block else 0.)
            # A dead worker whose pipe does not read as closed yet.
            ready += [self._connections[i] for i in indices
                      if not self._processes[i].is_alive()
                      and self._connections[i] not in ready]
            if ready or not block:
                return [indices[connections.index(c)] for c in ready]

    def _receive(self, index):
        try:
            kind, payload = self._connections[index].recv()
        except (EOFError, OSError):
            self._processes[index].join(_JOIN_TIMEOUT_S)
            raise _ActorDied(
                f"actor process {index} (pid {self._processes[index].pid}) "
                f"exited (exit code {self._processes[index].exitcode}).") from None
        if kind == "error":
            raise _ActorDied(f"actor process {index} failed:\n{payload}")
        return payload

    def close(self):
        """Stops the workers (killed if they do not exit in time)."""
        self._count_discarded()
        self._finalizer()


def _process_worker(connection, config, seed_offset, start_update):
    """A worker process: serves unroll requests until the pipe closes.

    Ctrl-C and SIGTERM are left to the training process (a terminal or a
    scheduler may signal the whole process group): it finishes its update
    and closes the pipe, which ends this loop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    actor = None
    try:
        actor = _RemoteActor(config, seed_offset, start_update)
        while True:
            request = connection.recv()
            if request is None:
                break
            connection.send(("unroll", actor.unroll(*request)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # The training process closed the pipe: stop.
    except Exception:
        try:
            connection.send(("error", traceback.format_exc()))
        except OSError:
            pass
    finally:
        if actor is not None:
            actor.close()
        connection.close()


def _stop_processes(connections, processes):
    """Stops the workers; a slot whose worker never started (its start
    raised in `ProcessActors.__init__`) holds None and is skipped."""
    connections = [c for c in connections if c is not None]
    processes = [p for p in processes if p is not None]
    for connection in connections:
        try:
            connection.send(None)
        except OSError:
            pass  # Already gone.
        # A worker blocked sending an unroll gets a broken pipe and exits.
        connection.close()
    for process in processes:
        process.join(_JOIN_TIMEOUT_S)
        if process.is_alive():  # Workers ignore SIGTERM: kill.
            process.kill()
            process.join()


def _import_ray(loopback, start_here):
    """Imports Ray.

    Args:
      loopback: Keep Ray's addresses on 127.0.0.1.
      start_here: Ray will be started by this process (no usage report).
    """
    if loopback:
        # Read when Ray is imported: without it Ray replaces a loopback
        # address by the machine's network address, both for a Ray it starts
        # and for a RAY_ADDRESS of 127.0.0.1 (where a head started with
        # --node-ip-address=127.0.0.1 listens).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if start_here:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
    except ImportError as error:
        raise ImportError(
            "Config.backend='ray' needs Ray: pip install 'tf-vtrace[ray]'."
        ) from error
    return ray


class RayActors(_AsyncActors):
    """`config.num_actors` `LocalActor`s as Ray actors.

    Uses the Ray cluster this process is connected to: `ray.init(address=...)`
    called before, or the one at the ``RAY_ADDRESS`` environment variable
    (``HEAD_IP:PORT`` of a ``ray start --head``; a ``ConnectionError``
    naming RAY_ADDRESS if it cannot be reached; for a 127.0.0.1 address Ray
    is kept on loopback as below). Without either it starts a one-machine
    Ray on loopback (own temporary directory, no dashboard, usage statistics
    off), shut down again by `close`. Weights go into Ray's object store once
    per version and are shared by the actors.

    Args:
      config: A `tf_vtrace.agent.config.Config`.
      worker_index: This host's index in a multi-worker run.
      num_cpus_per_actor: Ray CPUs each actor reserves.
    """

    def __init__(self, config, worker_index=0, start_update=0,
                 num_cpus_per_actor=1):
        super().__init__(config, worker_index, start_update)
        address = os.environ.get("RAY_ADDRESS")
        start_here = address is None and not _ray_initialized()
        ray = _import_ray(
            loopback=start_here or _is_loopback_address(address),
            start_here=start_here)
        self._ray = ray
        self._temp_dir = None
        if not ray.is_initialized():
            if address is not None:
                _connect_ray(ray, address)
            else:
                self._temp_dir = tempfile.mkdtemp(prefix="tf_vtrace_ray_")
                ray.init(num_cpus=self.num_actors * num_cpus_per_actor,
                         include_dashboard=False, log_to_driver=False,
                         _temp_dir=self._temp_dir)
        self._remote_class = ray.remote(num_cpus=num_cpus_per_actor)(_RemoteActor)
        self._actors = [None] * self.num_actors
        for index in range(self.num_actors):
            self._start(index, start_update)
        self._pending = {}
        self._weights_ref = None

    def _start(self, index, start_update):
        if self._actors[index] is not None:  # A failed actor: end it.
            self._ray.kill(self._actors[index])
        self._actors[index] = self._remote_class.remote(
            self.config, self._seed_offset(index), start_update)

    def _submit(self, index, weights, version):
        if weights is not None:
            if self._weights_ref is None or self._weights_ref[0] != version:
                self._weights_ref = (version, self._ray.put(weights))
            weights = self._weights_ref[1]
        self._pending[index] = self._actors[index].unroll.remote(weights, version)

    def _poll(self, indices, block):
        refs = [self._pending[i] for i in indices]
        ready, _ = self._ray.wait(refs, num_returns=1 if block else len(refs),
                                  timeout=None if block else 0)
        if block:  # Every other one that is ready too.
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        return [indices[refs.index(ref)] for ref in ready]

    def _receive(self, index):
        errors = self._ray.exceptions
        try:
            return self._ray.get(self._pending.pop(index))
        except (errors.RayActorError, errors.RayTaskError) as error:
            raise _ActorDied(f"Ray actor {index}: {error}") from None

    def close(self):
        """Kills the actors; shuts down a Ray started by this backend."""
        self._count_discarded()
        ray = self._ray
        for handle in self._actors:
            ray.kill(handle)
        self._actors, self._pending = [], {}
        if self._temp_dir is not None:
            ray.shutdown()
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None


# How long `_connect_ray` waits for the head's port to accept a connection.
_RAY_CONNECT_TIMEOUT_S = 10.


def _host_and_port(address):
    """(host, port) of a plain ``host:port`` Ray address, else None (``auto``,
    ``ray://…`` client addresses: left to Ray)."""
    if "://" in address:
        return None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _is_loopback_address(address):
    """Whether the Ray address `address` (or None) names this machine's
    loopback interface."""
    host_port = address and _host_and_port(address)
    if not host_port:
        return False
    host = host_port[0]
    return host == "localhost" or host == "::1" or host.startswith("127.")


def _connect_ray(ray, address):
    """Connects to the Ray cluster at `address` (the value of RAY_ADDRESS).

    Ray itself retries an unreachable address for minutes and then reports
    only "Failed to connect"; here an address nothing listens on fails at
    once, and a failed connection names RAY_ADDRESS and the usual causes.
    """
    hint = (f"RAY_ADDRESS={address!r}: could not connect to a Ray cluster "
            "there. Start one with `ray start --head --port=PORT` on the head "
            "host and set RAY_ADDRESS=HEAD_IP:PORT, or unset RAY_ADDRESS to "
            "let the backend start a one-machine Ray.")
    host_port = _host_and_port(address)
    if host_port is not None:
        try:
            socket.create_connection(host_port, _RAY_CONNECT_TIMEOUT_S).close()
        except OSError as error:
            raise ConnectionError(f"{hint} ({error})") from error
    try:
        ray.init(log_to_driver=False)
    except ConnectionError as error:
        if _mentions(error, "AuthenticationError"):
            hint += (
                " The cluster uses token authentication (`ray start` turns it "
                "on when ~/.ray/auth_token exists) and Ray sends no token to "
                "an address given explicitly unless RAY_AUTH_MODE=token is "
                "set: set it, with the head's token in ~/.ray/auth_token, in "
                "RAY_AUTH_TOKEN_PATH or in RAY_AUTH_TOKEN.")
        raise ConnectionError(hint) from error


def _mentions(error, text):
    """Whether `text` is in the type name or message of `error` or of an
    exception in its cause chain (Ray puts the underlying error's traceback
    into the message of the one it raises)."""
    while error is not None:
        if text in type(error).__name__ or text in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _ray_initialized():
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()
