"""The out-of-process backends' base: remote actors, one unroll in flight each.

`ProcessActors` (`processes.py`) and `RayActors` (`ray_actors.py`) stand on
`_AsyncActors`; each remote actor is a `_RemoteActor` (weights in, one
unroll out). With several actors each one always has an unroll in flight:
`collect` returns the one that has been ready longest (so no actor starves,
see `_AsyncActors`) and at once asks that actor for its next unroll, with
the newest weights handed to `set_weights` (IMPALA's actors fetch the
parameters at the start of each unroll). ``collect_queued()`` takes an
unroll only if one is finished already, never waiting. An actor that dies
(its process killed, `ray.kill`) or raises is replaced (`_replace`).
"""

import abc
import collections
import os
import time

from tf_vtrace.agent import actor as actor_lib
from tf_vtrace.agent import envs
from tf_vtrace.agent.backends._common import (
    _POLL_S,
    ActorFailure,
    _check_drain_deadline,
    _FailureCounts,
    actor_seed_offset,
)


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
        self.action_policy = envs.action_policy(action_space)
        self.head_sizes = getattr(self.action_policy, "head_sizes", None)
        self.version = 0
        self.unrolls_per_actor = [0] * self.num_actors
        self._failures = _FailureCounts(config)
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
