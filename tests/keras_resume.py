"""`keras.callbacks.BackupAndRestore` with `ImpalaLoss`: a fit interrupted
mid-epoch and resumed by a fresh model from the same backup directory ends
with the weights of a fit that was never interrupted.

Shared by tests/test_keras.py (Keras 3, in the pytest process) and
tests/test_keras_legacy.py (tf_keras, in a subprocess with
TF_USE_LEGACY_KERAS=1): `check_resume_matches_uninterrupted` uses whichever
Keras `tf_vtrace.keras` built on.
"""
import os

import numpy as np

from tf_vtrace.keras import ImpalaLoss, impala_metrics, keras, pack_targets

B, T, A, OBS = 6, 5, 3, 4
BATCHES_PER_EPOCH, EPOCHS = 4, 5
INTERRUPT_AT = (2, 1)  # (epoch, batch), zero-based: in the middle of epoch 2


def _data():
    size = BATCHES_PER_EPOCH * B
    rng = np.random.default_rng(0)
    y_true = pack_targets(
        actions=np.arange(size * T).reshape(size, T) % A,
        rewards=rng.normal(size=(size, T)), discounts=np.full((size, T), 0.9),
        behaviour_policy_logits=rng.normal(0, 2, (size, T, A)))
    return rng.normal(size=(size, T + 1, OBS)).astype(np.float32), y_true.numpy()


def _compiled_model():
    keras.utils.set_random_seed(0)
    obs = keras.Input((None, OBS))
    hidden = keras.layers.Dense(16, activation="tanh")(obs)
    outputs = keras.layers.Concatenate()(
        [keras.layers.Dense(A)(hidden), keras.layers.Dense(1)(hidden)])
    model = keras.Model(obs, outputs)
    loss = ImpalaLoss(entropy_cost=0.01, kl_cost=0.01)
    model.compile(keras.optimizers.Adam(0.01), loss=loss,
                  metrics=impala_metrics(loss, ["mean_rho", "baseline_loss"]))
    return model


class Interrupt(keras.callbacks.Callback):
    """Raises after batch `batch` of epoch `epoch`, as a crash would."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.at, self.epoch = (epoch, batch), None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            raise InterruptedError(f"interrupted after batch {batch} of epoch {self.epoch}")


def _fit(model, obs, y_true, callbacks=()):
    # shuffle=False: tf_keras draws each epoch's order from a stream that
    # restarts with the process, so a resumed shuffled fit sees other orders.
    return model.fit(obs, y_true, batch_size=B, epochs=EPOCHS, shuffle=False,
                     verbose=0, callbacks=list(callbacks)).history


def check_resume_matches_uninterrupted(backup_dir):
    obs, y_true = _data()
    uninterrupted = _compiled_model()
    _fit(uninterrupted, obs, y_true)

    crashed = _compiled_model()
    try:
        _fit(crashed, obs, y_true, [keras.callbacks.BackupAndRestore(backup_dir),
                                    Interrupt(*INTERRUPT_AT)])
        raise AssertionError("the interrupting callback did not stop fit")
    except InterruptedError:
        pass
    assert os.listdir(backup_dir), "no backup written before the interruption"
    assert int(crashed.optimizer.iterations) == (
        INTERRUPT_AT[0] * BATCHES_PER_EPOCH + INTERRUPT_AT[1] + 1)

    resumed = _compiled_model()  # a fresh model, same backup directory
    history = _fit(resumed, obs, y_true, [keras.callbacks.BackupAndRestore(backup_dir)])
    # The backup is from the end of the last finished epoch: the interrupted
    # epoch runs again from its start, and only the epochs left are run.
    assert len(history["loss"]) == EPOCHS - INTERRUPT_AT[0], history
    assert int(resumed.optimizer.iterations) == EPOCHS * BATCHES_PER_EPOCH
    # Exact equality, no tolerance: the restored float32 weights and Adam
    # moments are the saved bits, and the resumed fit runs the same ops in
    # the same order on the same batches as the uninterrupted one. A lost
    # optimizer moment or an epoch run twice moves the weights by ~lr = 1e-2.
    for got, want in zip(resumed.get_weights(), uninterrupted.get_weights()):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(resumed.optimizer.variables, uninterrupted.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
