"""The actor thread, its dataset and the weight-sync callback, around real
`fit` runs of `ImpalaLoss` with real CartPole actors (`LocalActor`)."""
import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_vtrace.agent import envs, networks
from tf_vtrace.agent.actor import LocalActor
from tf_vtrace.agent.config import Config
from tf_vtrace.keras import ImpalaLoss, unpack_targets
from tf_vtrace.keras_training import (
    ActorError,
    ActorThread,
    SyncWeights,
    UnrollModel,
    unroll_to_batch,
)

B, T = 4, 5
CONFIG = Config(num_envs=B, unroll_length=T, jit_compile=False)


class RecordingActor(LocalActor):
    """A real CartPole actor that keeps every unroll it collected and can be
    told to fail at its n-th `collect`."""

    def __init__(self, config, fail_at=None):
        super().__init__(config)
        self.collected, self.fail_at = [], fail_at

    def collect(self):
        if self.fail_at is not None and len(self.collected) == self.fail_at:
            raise ValueError("the env crashed")
        unroll = super().collect()
        self.collected.append(unroll)
        return unroll


def _model():
    observation_space, action_space = envs.env_spaces(CONFIG.env_id)
    network = networks.build_network(observation_space,
                                     envs.head_sizes(action_space), seed=0)
    model = UnrollModel(network)
    model.compile(keras.optimizers.Adam(1e-3),
                  loss=ImpalaLoss(reduction="mean", jit_compile=False))
    return model, network


class _Versions(keras.callbacks.Callback):
    """The learner version after each batch, and an optional stop."""

    def __init__(self, stop_after=None, raise_after=None):
        super().__init__()
        self.versions, self.stop_after, self.raise_after = [], stop_after, raise_after
        self.weights = {}

    def on_train_begin(self, logs=None):
        self.weights[0] = self.model.network.get_weights()

    def on_train_batch_end(self, batch, logs=None):
        self.versions.append(int(self.model.optimizer.iterations.numpy()))
        self.weights[self.versions[-1]] = self.model.network.get_weights()
        if len(self.versions) == self.stop_after:
            self.model.stop_training = True
        if len(self.versions) == self.raise_after:
            raise KeyboardInterrupt("stopped by the user")


def _fit(actor_thread, model, network, epochs, steps, *callbacks):
    return model.fit(actor_thread.dataset(), epochs=epochs, steps_per_epoch=steps,
                     shuffle=False, verbose=0,
                     callbacks=[SyncWeights(actor_thread, network), *callbacks])


def test_fit_trains_on_every_unroll_once_with_the_newest_weights():
    actor = RecordingActor(CONFIG)
    model, network = _model()
    versions = _Versions()
    with ActorThread(actor, num_unrolls=6, capacity=1) as actor_thread:
        history = _fit(actor_thread, model, network, 2, 3, versions)
    assert not actor_thread._thread.is_alive()
    assert len(actor.collected) == 6 and actor_thread.unused() == []
    assert versions.versions == [1, 2, 3, 4, 5, 6]
    # Epoch logs: env steps in all, through the callback.
    assert history.history["env_steps"] == [3 * B * T, 6 * B * T]
    tags = [int(u["policy_version"]) for u in actor.collected]
    # Versions never go back, the actor picked up new weights, and an unroll
    # can be behind its update by at most the queue (1), tf.data's read-ahead
    # and the unroll being collected.
    assert tags == sorted(tags) and tags[0] == 0 and tags[-1] > 0, tags
    lags = [update - tag for update, tag in enumerate(tags)]
    assert min(lags) >= 0 and max(lags) <= 4, lags
    assert np.mean(history.history["policy_lag"]) == pytest.approx(np.mean(lags))
    # The actor acts with the model's weights of the version it was told.
    for mine, learners in zip(actor.model.get_weights(),
                              versions.weights[tags[-1]]):
        np.testing.assert_array_equal(mine, learners)


def test_dataset_yields_the_unrolls_in_collection_order():
    actor = RecordingActor(CONFIG)
    with ActorThread(actor, num_unrolls=3, capacity=3) as actor_thread:
        batches = list(actor_thread.unrolls())
    assert len(batches) == 3
    for (observations, y_true), unroll in zip(batches, actor.collected):
        np.testing.assert_array_equal(observations,
                                      np.swapaxes(unroll["observations"], 0, 1))
        parts = unpack_targets(tf.constant(y_true), [2])
        np.testing.assert_array_equal(parts["actions"][0],
                                      unroll["actions"][..., 0].T)
        np.testing.assert_array_equal(parts["discounts"], unroll["discounts"].T)
        np.testing.assert_array_equal(parts["behaviour_policy_logits"][0],
                                      np.swapaxes(unroll["behaviour_logits"], 0, 1))


def test_unroll_to_batch_splits_the_heads():
    rng = np.random.default_rng(0)
    unroll = dict(observations=rng.normal(size=(T + 1, B, 4)),
                  actions=rng.integers(0, 2, (T, B, 2)),
                  behaviour_logits=rng.normal(size=(T, B, 5)),
                  rewards=np.ones((T, B)), discounts=np.full((T, B), .9),
                  truncated=np.zeros((T, B)), truncation_values=np.zeros((T, B)))
    observations, y_true = unroll_to_batch(unroll, head_sizes=(2, 3))
    assert observations.shape == (B, T + 1, 4) and y_true.shape == (B, T, 5 + 2 + 5)
    parts = unpack_targets(tf.constant(y_true), [2, 3])
    np.testing.assert_array_equal(parts["actions"][1], unroll["actions"][..., 1].T)
    np.testing.assert_allclose(parts["behaviour_policy_logits"][1],
                               np.swapaxes(unroll["behaviour_logits"][..., 2:], 0, 1),
                               rtol=1e-6)


def test_actor_error_surfaces_in_the_main_thread_naming_the_actor():
    actor = RecordingActor(CONFIG, fail_at=4)
    model, network = _model()
    versions = _Versions()
    with pytest.raises(ActorError, match="'actor-7' failed: ValueError: the env "
                       "crashed") as raised:
        with ActorThread(actor, num_unrolls=9, capacity=2,
                         name="actor-7") as actor_thread:
            _fit(actor_thread, model, network, 3, 3, versions)
    assert isinstance(raised.value.__cause__, ValueError)
    # The 4 unrolls collected before the error were all trained on.
    assert versions.versions == [1, 2, 3, 4] and actor_thread.unused() == []


def test_actor_error_before_the_first_unroll():
    with pytest.raises(ActorError, match="'actor' failed: ValueError"):
        with ActorThread(RecordingActor(CONFIG, fail_at=0), 3) as actor_thread:
            actor_thread.dataset()


@pytest.mark.parametrize("stop", ["stop_training", "exception"])
def test_fit_stopping_early_loses_no_unroll_and_frees_the_actor(stop):
    actor = RecordingActor(CONFIG)
    model, network = _model()
    versions = (_Versions(stop_after=2) if stop == "stop_training"
                else _Versions(raise_after=2))
    actor_thread = ActorThread(actor, num_unrolls=20, capacity=2)
    with pytest.raises(KeyboardInterrupt) if stop == "exception" else (
            contextlib.nullcontext()):
        with actor_thread:
            _fit(actor_thread, model, network, 4, 5, versions)
    assert len(versions.versions) == 2
    # The actor stopped early, and what it collected beyond the 2 trained
    # unrolls is handed back.
    assert not actor_thread._thread.is_alive() and len(actor.collected) < 20
    unused = actor_thread.unused()
    assert len(unused) == len(actor.collected) - 2
    for mine, collected in zip(unused, actor.collected[2:]):
        assert mine is collected


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="`num_unrolls` and `capacity`"):
        ActorThread(RecordingActor(CONFIG), 0)
    with pytest.raises(RuntimeError, match="inside `with ActorThread"):
        ActorThread(RecordingActor(CONFIG), 2).dataset()
    with pytest.raises(ValueError, match="`every` must be >= 1"):
        SyncWeights(None, every=0)
