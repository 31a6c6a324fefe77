"""Actors that act while `model.fit` learns: a thread, a dataset, a callback.

The pieces of an IMPALA trainer built on `model.fit(loss=ImpalaLoss())`:

* `ActorThread` runs an actor (an object with ``set_weights(weights,
  version)`` and ``collect()``, e.g. `tf_vtrace.agent.actor.LocalActor`) in a
  thread that keeps acting with the newest weights it was given and puts its
  unrolls in a bounded queue;
* `ActorThread.dataset` is the `tf.data.Dataset` that `fit` reads: the
  unrolls in the order they were collected, packed by `unroll_to_batch` into
  (observations, `pack_targets` tensor);
* `UnrollModel` wraps the network the actor acts with (observations →
  logits, value) into the model `fit` trains: all T + 1 observations of B
  unrolls at once, logits and value packed as `ImpalaLoss` reads them;
* `SyncWeights` is the callback that hands the model's new weights to the
  actor every N batches, tagged with the learner version (optimizer steps),
  and adds the actor's statistics (env steps, episode returns, policy lag) to
  the epoch logs, where `keras.callbacks.TensorBoard` writes them.

Every unroll carries the version of the weights it was acted with; its policy
lag is the number of updates between those weights and the update that
trains on it. The thread collects exactly the unrolls `fit` is told to read
(``epochs * steps_per_epoch``), so the end of `fit` leaves none behind; if
`fit` stops earlier, `ActorThread.unused` returns what it did not train on.
An exception in the actor ends the dataset after the unrolls already
collected and is raised again, naming the actor, when the `with` block exits.
"""

import collections
import threading

import numpy as np
import tensorflow as tf

from tf_vtrace._actor_queue import ActorQueue
from tf_vtrace.keras import keras, pack_targets

__all__ = ["ActorError", "ActorThread", "SyncWeights", "UnrollModel",
           "unroll_to_batch"]

class ActorError(RuntimeError):
    """The actor thread failed; the actor's own exception is the `__cause__`."""


def unroll_to_batch(unroll, head_sizes=None):
    """An actor's time-major unroll dict → `fit`'s (x, y_true), batch-major.

    Args:
      unroll: A dict in the layout of `tf_vtrace.agent.actor` (observations
        [T + 1, B, ...], actions [T, B, H], behaviour_logits [T, B, ΣA],
        rewards, discounts, truncated and truncation_values [T, B]).
      head_sizes: Actions per head; None for one head.

    Returns:
      ``(observations [B, T + 1, ...], y_true [B, T, 5 + H + ΣA])``, numpy.
    """
    def batch_major(array):
        return np.swapaxes(np.asarray(array), 0, 1)

    actions = batch_major(unroll["actions"])
    logits = batch_major(unroll["behaviour_logits"])
    sizes = list(head_sizes or [logits.shape[-1]])
    y_true = pack_targets(
        actions=list(np.moveaxis(actions, -1, 0)),
        rewards=batch_major(unroll["rewards"]),
        discounts=batch_major(unroll["discounts"]),
        behaviour_policy_logits=np.split(logits, np.cumsum(sizes)[:-1], -1),
        truncated=batch_major(unroll["truncated"]),
        truncation_values=batch_major(unroll["truncation_values"]))
    return batch_major(unroll["observations"]), y_true.numpy()


@keras.saving.register_keras_serializable(package="tf_vtrace")
class UnrollModel(keras.Model):
    """A per-observation network applied to all T + 1 observations of B
    unrolls: [B, T + 1, ...] → logits and value packed [B, T + 1, ΣA + 1],
    the `y_pred` that `ImpalaLoss` reads (the last value bootstraps).

    Args:
      network: A Keras model observations [N, ...] → (logits [N, ΣA],
        value [N]), e.g. `tf_vtrace.agent.networks.build_network`'s; its
        weights are the actor's (``network.get_weights()``).
    """

    def __init__(self, network, **kwargs):
        super().__init__(**kwargs)
        self.network = network

    def call(self, observations):
        shape = tf.shape(observations)
        flat = tf.reshape(observations,
                          tf.concat([[-1], shape[2:]], axis=0))
        logits, value = self.network(flat)
        packed = tf.concat([logits, value[:, None]], axis=-1)
        return tf.reshape(packed, tf.stack([shape[0], shape[1],
                                            packed.shape[-1]]))

    def get_config(self):
        return dict(super().get_config(),
                    network=keras.saving.serialize_keras_object(self.network))

    @classmethod
    def from_config(cls, config):
        network = keras.saving.deserialize_keras_object(config.pop("network"))
        return cls(network, **config)


class _Statistics:
    """What `fit` has trained on since the last `pop`."""

    def __init__(self):
        self._lock = threading.Lock()
        self.env_steps = 0
        self._lags, self._returns, self._lengths = [], [], []

    def add(self, unroll, lag):
        with self._lock:
            self.env_steps += int(np.size(unroll["rewards"]))
            self._lags.append(lag)
            self._returns += list(unroll["episode_returns"])
            self._lengths += list(unroll["episode_lengths"])

    def pop(self):
        with self._lock:
            def mean(values):
                return float(np.mean(values)) if values else float("nan")
            out = {"env_steps": float(self.env_steps),
                   "policy_lag": mean(self._lags),
                   "episode_return": mean(self._returns),
                   "episode_length": mean(self._lengths)}
            self._lags, self._returns, self._lengths = [], [], []
            return out


class ActorThread:
    """Runs ``actor.collect()`` `num_unrolls` times in a thread, into a queue.

    Use it as a context manager around `fit`: entering starts the thread;
    exiting stops it, waits for it and raises `ActorError` (naming the actor)
    if it failed.

    The queue and its waits are `tf_vtrace._actor_queue.ActorQueue`, the
    core the agent's `tf_vtrace.agent.backends.ThreadActors` stands on too.
    The two differ beside the queue, each as its consumer needs: here one
    thread takes each set of weights published once, and a failure ends
    the dataset (after the unrolls already queued) and is raised at the
    end of the `with` block, where `fit` has stopped; `ThreadActors`' threads
    read one version-tagged set, and a failure is queued like an unroll
    for the learner, which replaces the thread and goes on.

    Args:
      actor: Has ``set_weights(weights, version)`` and ``collect()`` → an
        unroll dict with ``policy_version``, ``rewards``, ``episode_returns``
        and ``episode_lengths`` (as `tf_vtrace.agent.actor.LocalActor`).
      num_unrolls: Unrolls to collect: ``epochs * steps_per_epoch`` of `fit`.
      capacity: Unrolls the queue holds before the actor waits for `fit`.
      name: The thread's name, used in errors.
    """

    def __init__(self, actor, num_unrolls, capacity=2, name="actor"):
        if int(num_unrolls) < 1 or int(capacity) < 1:
            raise ValueError(f"`num_unrolls` and `capacity` must be >= 1, got "
                             f"{num_unrolls} and {capacity}.")
        self.actor, self.num_unrolls, self.name = actor, int(num_unrolls), name
        self._queue = ActorQueue(int(capacity))
        self._weights_lock = threading.Lock()
        self._new_weights = None
        self._in_flight = collections.deque()  # handed to tf.data, not trained
        self._not_queued = None  # collected when told to stop
        self.statistics = _Statistics()
        self.error = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def publish(self, weights, version):
        """Act with `weights` (numpy list) of learner `version` from the next
        unroll on; replaces weights published before and not yet picked up."""
        with self._weights_lock:
            self._new_weights = (weights, int(version))

    def _take_new_weights(self):
        with self._weights_lock:
            new, self._new_weights = self._new_weights, None
        if new is not None:
            self.actor.set_weights(*new)

    def _run(self):
        try:
            for _ in range(self.num_unrolls):
                self._take_new_weights()
                if self._queue.stopped():
                    return
                unroll = self.actor.collect()
                if not self._queue.put(unroll):  # told to stop: keep it for `unused`
                    self._not_queued = unroll
                    return
        except Exception as error:  # any failure is handed to the main thread
            self.error = error  # raised again in the main thread by __exit__

    def _get(self):
        """The next unroll; None once the thread has ended and left none."""
        return self._queue.get(self._thread.is_alive)

    def unrolls(self, to_batch=unroll_to_batch):
        """Yields `to_batch(unroll)` for each unroll, in collection order."""
        for _ in range(self.num_unrolls):
            unroll = self._get()
            if unroll is None:
                return
            self._in_flight.append(unroll)
            yield to_batch(unroll)

    def dataset(self, to_batch=unroll_to_batch):
        """The `tf.data.Dataset` of `unrolls(to_batch)` for `fit` (run with
        ``steps_per_epoch`` and ``shuffle=False``); the element spec is read
        from a first unroll, which is not lost: it is the first element."""
        first = to_batch(self._peek())
        signature = tuple(tf.TensorSpec(a.shape, tf.as_dtype(a.dtype))
                          for a in first)
        # tf.data would otherwise inject a prefetch that reads 2 unrolls
        # ahead of `fit`: 2 more updates of policy lag, for no gain here.
        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.inject_prefetch = False
        return tf.data.Dataset.from_generator(
            lambda: self.unrolls(to_batch),
            output_signature=signature).with_options(options)

    def _peek(self):
        """The first unroll, waited for and put back for `_get` to return
        first."""
        if self._thread.ident is None:
            raise RuntimeError("ActorThread.dataset() reads the actor's first "
                               "unroll: call it inside `with ActorThread(...)`.")
        first = self._get()
        if first is None:
            self._raise_error()
            raise ActorError(f"actor thread {self.name!r} ended before its "
                             "first unroll.")
        self._queue.put_back(first)
        return first

    def batch_trained(self, version):
        """Marks the oldest unroll handed to `fit` as trained on by the update
        that made learner `version` (its policy lag: the updates before it
        since the unroll's weights)."""
        if self._in_flight:
            unroll = self._in_flight.popleft()
            self.statistics.add(unroll, version - 1 - int(unroll["policy_version"]))

    def unused(self):
        """The unrolls collected but not trained on (after the thread ends)."""
        left = list(self._in_flight) + self._queue.drain()
        return left + [u for u in (self._not_queued,) if u is not None]

    def __enter__(self):
        self._thread.start()
        return self

    def _raise_error(self):
        if self.error is not None:
            raise ActorError(
                f"actor thread {self.name!r} failed: "
                f"{type(self.error).__name__}: {self.error}") from self.error

    def __exit__(self, *exc_info):
        self._queue.stop()
        self._thread.join()
        self._raise_error()
        return False


class SyncWeights(keras.callbacks.Callback):
    """Gives the actor the model's new weights every `every` batches.

    Also marks each batch's unroll as trained on (`ActorThread.unused`) and
    adds the actor's statistics since the last epoch to the epoch logs:
    ``env_steps`` (in all), ``policy_lag`` (mean over the epoch's unrolls),
    ``episode_return`` and ``episode_length`` (means over the episodes that
    ended in them). List it before `keras.callbacks.TensorBoard`, which then
    writes them next to the loss and the `impala_metrics`.

    Args:
      actor_thread: The `ActorThread` feeding `fit`.
      network: The Keras model whose ``get_weights()`` the actor's
        ``set_weights`` takes (default: the model being fit).
      every: Batches between two weight hand-overs.
    """

    def __init__(self, actor_thread, network=None, every=1):
        super().__init__()
        if int(every) < 1:
            raise ValueError(f"`every` must be >= 1, got {every}.")
        self.actor_thread, self.network, self.every = (
            actor_thread, network, int(every))

    def on_train_batch_end(self, batch, logs=None):
        version = int(self.model.optimizer.iterations.numpy())
        self.actor_thread.batch_trained(version)
        if version % self.every == 0:
            network = self.network if self.network is not None else self.model
            self.actor_thread.publish(network.get_weights(), version)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(self.actor_thread.statistics.pop())
