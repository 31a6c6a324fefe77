"""`ImpalaLoss` with a diagonal Gaussian head in the packed Keras layout.

D action dimensions travel as D heads of (mean, log-std); `GaussianParams`
builds them from the model's mean and a learned state-independent log-std
(or a state-dependent one). The loss is checked against the functional
`impala_loss` of the same numbers with one D-dimensional head, and a tiny
model is fitted on a one-step task whose best action is known.
"""
import numpy as np
import pytest
import tensorflow as tf

from tf_vtrace.distributions import diagonal_gaussian, normal
from tf_vtrace.impala import impala_loss
from tf_vtrace.keras import GaussianParams, ImpalaLoss, keras, pack_targets

B, T, D, OBS = 16, 5, 3, 4
BEST_ACTION = np.array([0.8, -0.5, 0.3], np.float32)


def tiny_model(state_dependent=False, seed=0):
    keras.utils.set_random_seed(seed)
    observations = keras.Input((T + 1, OBS))
    hidden = keras.layers.Dense(16, activation="tanh")(observations)
    mean = keras.layers.Dense(D)(hidden)
    if state_dependent:
        params = GaussianParams()(mean, keras.layers.Dense(D)(hidden))
    else:
        params = GaussianParams(initial_log_std=-0.5, name="gaussian")(mean)
    value = keras.layers.Dense(1)(hidden)
    return keras.Model(observations,
                       keras.layers.Concatenate()([params, value]))


def one_step_batch(model, seed):
    """Actions from the model's own Gaussian (μ), reward −|a − a*|² per
    step, every step an episode of its own (discount 0)."""
    rng = np.random.default_rng(seed)
    observations = rng.normal(size=(B, T + 1, OBS)).astype(np.float32)
    params = model(observations).numpy()[:, :T, :2 * D]
    mean, log_std = params[..., 0::2], params[..., 1::2]
    actions = mean + np.exp(log_std) * rng.normal(size=mean.shape)
    rewards = -((actions - BEST_ACTION) ** 2).sum(-1)
    y_true = pack_targets(actions.astype(np.float32), rewards,
                          np.zeros((B, T)), params)
    return observations, y_true


def loss_object(**options):
    return ImpalaLoss(action_sizes=[2] * D, dist_class=normal, **options)


def test_loss_is_the_one_d_dimensional_head_of_impala_loss():
    model = tiny_model()
    observations, y_true = one_step_batch(model, seed=1)
    y_pred = model(observations)
    # π lags μ: the loss's log ρ must be the joint one, over the dimensions.
    y_pred = y_pred + tf.random.stateless_normal(y_pred.shape, [1, 2], 0.3)
    loss = loss_object(entropy_cost=0.01, kl_cost=0.1, clip_rho_threshold=1.1,
                       clip_c_threshold=0.9)
    got = float(loss(y_true, y_pred))
    y_true = y_true.numpy()
    want, diagnostics = impala_loss(
        y_true[..., 5 + D:], y_pred[:, :T, :2 * D], y_true[..., 5:5 + D],
        y_true[..., 1], y_true[..., 0], y_pred[:, :T, -1], y_pred[:, T, -1],
        dist_class=diagonal_gaussian, entropy_cost=0.01, kl_cost=0.1,
        clip_rho_threshold=1.1, clip_c_threshold=0.9, time_major=False)
    np.testing.assert_allclose(got, float(want), rtol=1e-5)
    assert 0 < float(diagnostics["rho_clipped_fraction"]) < 1


@pytest.mark.parametrize("state_dependent", [False, True],
                         ids=["learned_log_std", "state_dependent_log_std"])
def test_a_tiny_gaussian_model_fits_toward_the_best_action(state_dependent):
    model = tiny_model(state_dependent)
    loss = loss_object(entropy_cost=0.0, reduction="mean")
    model.compile(keras.optimizers.Adam(3e-2), loss=loss)
    start = model(one_step_batch(model, 0)[0]).numpy()[..., :2 * D:2]
    for round_ in range(12):  # fresh on-policy data each round
        observations, y_true = one_step_batch(model, seed=100 + round_)
        history = model.fit(observations, y_true, epochs=5, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
    observations = one_step_batch(model, 999)[0]
    end = model(observations).numpy()[..., :2 * D:2]
    start_gap = np.abs(start - BEST_ACTION).mean()
    end_gap = np.abs(end - BEST_ACTION).mean()
    assert end_gap < 0.5 * start_gap, (start_gap, end_gap)
    if not state_dependent:
        log_std = model.get_layer("gaussian").log_std.numpy()
        assert not np.allclose(log_std, -0.5)  # the learned log-std moved


def test_saved_model_file_round_trip(tmp_path):
    model = tiny_model()
    model.compile("adam", loss=loss_object(entropy_cost=0.01))
    observations, y_true = one_step_batch(model, 3)
    model.fit(observations, y_true, epochs=1, verbose=0)
    path = str(tmp_path / "gaussian.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.loss.dist_class is normal
    np.testing.assert_allclose(loaded(observations), model(observations),
                               rtol=1e-6)
    np.testing.assert_allclose(float(loaded.loss(y_true, loaded(observations))),
                               float(model.loss(y_true, model(observations))),
                               rtol=1e-6)


def test_pack_targets_takes_the_actions_as_one_array():
    actions = np.arange(2 * 4 * D, dtype=np.float32).reshape(2, 4, D)
    packed = pack_targets(actions, np.ones((2, 4)), np.ones((2, 4)),
                          np.zeros((2, 4, 2 * D)))
    assert packed.shape == (2, 4, 5 + D + 2 * D)
    np.testing.assert_array_equal(packed[..., 5:5 + D], actions)
