"""The Keras faces (Keras 3, the default `tf.keras`): loss, metrics, layer, saving."""
import numpy as np
import pytest
import tensorflow as tf
from tolerances import EPS32, assert_close_to_rounding, rtol_for

from tf_vtrace.impala import impala_loss, vtrace_targets
from tf_vtrace.keras import (
    ImpalaLoss,
    ImpalaMetric,
    VTrace,
    impala_metrics,
    pack_targets,
    unpack_predictions,
    unpack_targets,
)

keras = pytest.importorskip("keras")  # tf.keras is Keras 3 in this process.

B, T, A, OBS = 6, 5, 3, 4
# A float32 loss computed two ways (the loss class's compiled call against
# the function, a fit step against a call): a sum of four signed terms per
# step over B·T steps, each from a T-step recursion.
LOSS_RTOL = rtol_for(np.float32, 4 * B * T + T)


def _batch(seed=0, b=B):
    rng = np.random.default_rng(seed)
    data = dict(
        actions=(np.arange(b * T).reshape(b, T) % A).astype(np.int32),
        rewards=rng.normal(size=(b, T)).astype(np.float32),
        discounts=np.where(rng.random((b, T)) < 0.2, 0., 0.9).astype(np.float32),
        behaviour_policy_logits=rng.normal(0, 2, (b, T, A)).astype(np.float32))
    obs = rng.normal(size=(b, T + 1, OBS)).astype(np.float32)
    return obs, data


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    obs = keras.Input((None, OBS))
    hidden = keras.layers.Dense(16, activation="tanh")(obs)
    logits = keras.layers.Dense(A)(hidden)
    value = keras.layers.Dense(1)(hidden)
    return keras.Model(obs, keras.layers.Concatenate()([logits, value]))


@pytest.mark.parametrize("options", [
    dict(), dict(reduction="mean", pg_target="lambda_returns", lambda_=0.8),
    dict(reduction="masked_mean", kl_cost=0.2, entropy_cost=0.01),
    dict(alpha_=0.4, clip_rho_threshold=0.9)])
def test_loss_class_is_the_function_on_unpacked_tensors(options):
    _, data = _batch()
    rng = np.random.default_rng(1)
    y_pred = tf.constant(rng.normal(size=(B, T + 1, A + 1)), tf.float32)
    mask = np.ones((B, T), np.float32)
    mask[:2, 3:] = 0.
    y_true = pack_targets(**data, mask=mask)
    loss = ImpalaLoss(**options)
    expected, _ = impala_loss(
        data["behaviour_policy_logits"], y_pred[:, :-1, :A], data["actions"],
        data["discounts"], data["rewards"], y_pred[:, :-1, A], y_pred[:, -1, A],
        mask=mask, time_major=False, **options)
    np.testing.assert_allclose(float(loss(y_true, y_pred)), float(expected),
                               rtol=LOSS_RTOL)
    # The dict form (custom training loops) gives the same.
    as_dicts = loss({**data, "mask": mask},
                    {"policy_logits": y_pred[..., :A], "values": y_pred[..., A]})
    np.testing.assert_allclose(float(as_dicts), float(expected), rtol=LOSS_RTOL)


def test_pack_unpack_round_trip_multi_head():
    rng = np.random.default_rng(2)
    actions = [rng.integers(0, 3, (B, T)), rng.integers(0, 2, (B, T))]
    logits = [rng.normal(size=(B, T, 3)), rng.normal(size=(B, T, 2))]
    packed = pack_targets(actions, np.ones((B, T)), np.ones((B, T)), logits,
                          truncated=np.zeros((B, T)))
    parts = unpack_targets(packed, [3, 2])
    for got, want in zip(parts["actions"] + parts["behaviour_policy_logits"],
                         actions + logits):
        # One float64 -> float32 cast: rounding to nearest, <= eps / 2.
        np.testing.assert_allclose(got, want, rtol=EPS32 / 2)
    preds = unpack_predictions(tf.zeros([B, T + 1, 6]), [3, 2])
    assert [p.shape[-1] for p in preds["policy_logits"]] == [3, 2]


def test_multi_head_loss_matches_function():
    rng = np.random.default_rng(3)
    sizes = [3, 2]
    actions = [rng.integers(0, p, (B, T)).astype(np.int32) for p in sizes]
    behaviour = [rng.normal(size=(B, T, p)).astype(np.float32) for p in sizes]
    rewards, discounts = np.ones((B, T), np.float32), np.full((B, T), .9, np.float32)
    y_pred = tf.constant(rng.normal(size=(B, T + 1, 6)), tf.float32)
    got = ImpalaLoss(action_sizes=sizes)(
        pack_targets(actions, rewards, discounts, behaviour), y_pred)
    want, _ = impala_loss(behaviour, [y_pred[:, :-1, :3], y_pred[:, :-1, 3:5]],
                          actions, discounts, rewards, y_pred[:, :-1, 5],
                          y_pred[:, -1, 5], time_major=False)
    np.testing.assert_allclose(float(got), float(want), rtol=LOSS_RTOL)


def test_wrong_structures_get_clear_errors():
    _, data = _batch()
    y_true = pack_targets(**data)
    with pytest.raises(ValueError, match="pack_targets"):
        ImpalaLoss()(y_true[..., :-1], tf.zeros([B, T + 1, A + 1]))
    with pytest.raises(ValueError, match="T \\+ 1"):
        ImpalaLoss()(y_true, tf.zeros([B, T, A + 1]))
    with pytest.raises(ValueError, match="action_sizes"):
        ImpalaLoss(action_sizes=[2, 2])(y_true, tf.zeros([B, T + 1, A + 1]))
    with pytest.raises(ValueError, match="`reduction` must be one of"):
        ImpalaLoss(reduction="batch")
    with pytest.raises(ValueError, match="`rewards` must be \\[B, T\\]"):
        pack_targets(**dict(data, rewards=np.ones([B])))


@pytest.mark.parametrize("channels", [A, 1])
def test_logits_alone_or_value_alone_blame_y_pred(channels):
    """A model that left out its value column, or the logits or the value of
    a two-output model (which tf_keras hands the loss one at a time): the
    error names `y_pred` and the concatenation, not `y_true`."""
    _, data = _batch()
    with pytest.raises(ValueError, match=r"`y_pred` has \d+ channels but `y_true` .*"
                                         r"Concatenate\(\)\(\[logits, value\]\)"):
        ImpalaLoss()(pack_targets(**data), tf.zeros([B, T + 1, channels]))


def test_a_two_output_model_fails_before_the_loss_in_keras_3():
    """Keras 3 maps a single loss over a list of outputs and raises its own
    KeyError before any loss runs (no loss can refuse it or support it):
    ImpalaLoss' docstring names the fix, one Concatenate output."""
    obs, data = _batch()
    inputs = keras.Input((None, OBS))
    model = keras.Model(inputs, [keras.layers.Dense(A)(inputs),
                                 keras.layers.Dense(1)(inputs)])
    model.compile("sgd", loss=ImpalaLoss())
    with pytest.raises(KeyError, match="in the `loss` argument"):
        model.fit(obs, pack_targets(**data), verbose=0)
    assert "Concatenate()([logits, value])" in ImpalaLoss.__doc__


def test_pack_targets_refuses_bool_discounts_and_takes_bool_masks():
    _, data = _batch()
    with pytest.raises(TypeError, match=r"`discounts` must be floating point, got "
                                        r"bools: .*gamma \* \(1 - dones\)"):
        pack_targets(**dict(data, discounts=data["discounts"] == 0))
    valid = np.ones([B, T], bool)
    np.testing.assert_array_equal(pack_targets(**data, mask=valid),
                                  pack_targets(**data))


def test_compile_fit_lowers_the_loss_and_shows_diagnostics():
    obs, data = _batch()
    model = _model()
    loss = ImpalaLoss(entropy_cost=0.01, kl_cost=0.01)
    model.compile(keras.optimizers.Adam(0.02), loss=loss,
                  metrics=impala_metrics(loss))
    history = model.fit(obs, pack_targets(**data), batch_size=B, epochs=10,
                        verbose=0).history
    # The targets move with V, so only the value regression is a fixed goal.
    assert history["baseline_loss"][-1] < 0.75 * history["baseline_loss"][0]
    for key in ("mean_rho", "rho_clipped_fraction", "c_clipped_fraction",
                "entropy", "kl", "policy_loss", "baseline_loss", "entropy_loss"):
        assert np.isfinite(history[key]).all(), key
    terms = sum(history[k][-1] for k in ("policy_loss", "baseline_loss",
                                          "entropy_loss", "kl_loss"))
    # The same float32 terms, summed by the loss and by this line.
    np.testing.assert_allclose(terms, history["loss"][-1], rtol=LOSS_RTOL)


def test_saved_model_with_loss_and_metrics_loads_safely(tmp_path):
    obs, data = _batch()
    model = _model()
    loss = ImpalaLoss(baseline_cost=0.25, entropy_cost=0.003, reduction="mean",
                      pg_target="lambda_returns", lambda_=0.9, clip_c_threshold=None,
                      alpha_=0.7)
    model.compile("adam", loss=loss, metrics=impala_metrics(loss, ["mean_rho"]))
    y_true = pack_targets(**data)
    before = model.evaluate(obs, y_true, verbose=0, return_dict=True)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras", safe_mode=True)
    assert isinstance(loaded.loss, ImpalaLoss)
    assert loaded.loss.get_config() == loss.get_config()
    after = loaded.evaluate(obs, y_true, verbose=0, return_dict=True)
    for key in before:
        # The reloaded model retraces the same step: rounding at most.
        np.testing.assert_allclose(after[key], before[key], rtol=LOSS_RTOL)


def test_metric_config_round_trips():
    metric = ImpalaMetric("kl", ImpalaLoss(kl_cost=0.5))
    clone = ImpalaMetric.from_config(metric.get_config())
    assert clone.name == "kl" and clone.impala_loss.kl_cost == 0.5
    with pytest.raises(ValueError, match="`diagnostic` must be one of"):
        ImpalaMetric("rho", ImpalaLoss())


def _functional_vtrace_model():
    inputs = dict(
        behaviour_policy_logits=keras.Input((None, A)),
        target_policy_logits=keras.Input((None, A)),
        actions=keras.Input((None,), dtype="int32"),
        discounts=keras.Input((None,)), rewards=keras.Input((None,)),
        values=keras.Input((None,)))
    outputs = VTrace(clip_rho_threshold=2.0, lambda_=0.9, alpha_=0.6,
                     name="vtrace")(**inputs)
    return keras.Model(inputs, outputs), inputs


def test_layer_in_functional_model_saves_and_matches(tmp_path):
    model, _ = _functional_vtrace_model()
    rng = np.random.default_rng(4)
    _, data = _batch()
    feed = dict(behaviour_policy_logits=data["behaviour_policy_logits"],
                target_policy_logits=rng.normal(size=(B, T, A)).astype(np.float32),
                actions=data["actions"], discounts=data["discounts"],
                rewards=data["rewards"],
                values=rng.normal(size=(B, T + 1)).astype(np.float32))
    out = model(feed)
    want = vtrace_targets(**dict(feed, values=feed["values"][:, :-1]),
                          bootstrap_value=feed["values"][:, -1],
                          clip_rho_threshold=2.0, lambda_=0.9, alpha_=0.6,
                          time_major=False)
    # float32 both ways, over the T-step recursion.
    assert_close_to_rounding(out["vs"], want.vs, np.float32, T)
    assert_close_to_rounding(out["pg_advantages"], want.pg_advantages, np.float32, T)
    model.save(tmp_path / "layer.keras")
    loaded = keras.models.load_model(tmp_path / "layer.keras", safe_mode=True)
    assert loaded.get_layer("vtrace").get_config()["lambda_"] == 0.9
    assert loaded.get_layer("vtrace").get_config()["alpha_"] == 0.6
    assert_close_to_rounding(loaded(feed)["vs"], out["vs"], np.float32, T)


class Learner(keras.Model):
    """A custom train_step computing the IMPALA loss with the VTrace layer."""

    def __init__(self):
        super().__init__()
        self.torso = keras.layers.Dense(16, activation="tanh")
        self.policy = keras.layers.Dense(A)
        self.value = keras.layers.Dense(1)
        self.vtrace = VTrace()
        self.tracker = keras.metrics.Mean(name="value_loss")

    def call(self, obs):
        hidden = self.torso(obs)
        return self.policy(hidden), self.value(hidden)[..., 0]

    def train_step(self, data):
        obs, batch = data
        with tf.GradientTape() as tape:
            logits, values = self(obs, training=True)
            targets = self.vtrace(
                batch["behaviour_policy_logits"], logits[:, :-1], batch["actions"],
                batch["discounts"], batch["rewards"], values)
            log_pi = -tf.nn.sparse_softmax_cross_entropy_with_logits(
                batch["actions"], logits[:, :-1])
            value_loss = 0.25 * tf.reduce_sum(tf.square(targets["vs"] - values[:, :-1]))
            loss = -tf.reduce_sum(log_pi * targets["pg_advantages"]) + value_loss
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.tracker.update_state(value_loss)
        return {"value_loss": self.tracker.result()}


def test_layer_in_custom_train_step():
    obs, data = _batch()
    learner = Learner()
    learner.compile(keras.optimizers.Adam(0.02))
    history = learner.fit(obs, data, batch_size=B, epochs=10, verbose=0).history
    assert history["value_loss"][-1] < history["value_loss"][0]


def test_mixed_precision_loss_is_float32_and_trains():
    obs, data = _batch()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = _model()
        assert model.output.dtype == "float16"
        loss = ImpalaLoss()
        y_true = pack_targets(**data)
        assert loss(y_true, model(obs)).dtype == tf.float32
        model.compile(keras.optimizers.Adam(0.02), loss=loss)
        history = model.fit(obs, y_true, batch_size=B, epochs=5, verbose=0).history
    finally:
        keras.config.set_dtype_policy(previous)
    assert np.isfinite(history["loss"]).all()


@keras.saving.register_keras_serializable(package="tf_vtrace_tests")
def tempered_categorical(logits):
    import tensorflow_probability as tfp
    return tfp.distributions.Categorical(logits=logits / 2.0)


def test_dist_class_passes_through_and_serializes():
    _, data = _batch()
    rng = np.random.default_rng(5)
    y_pred = tf.constant(rng.normal(size=(B, T + 1, A + 1)), tf.float32)
    loss = ImpalaLoss(dist_class=tempered_categorical, entropy_cost=0.01)
    want, _ = impala_loss(
        data["behaviour_policy_logits"], y_pred[:, :-1, :A],
        data["actions"].astype(np.float32), data["discounts"], data["rewards"],
        y_pred[:, :-1, A], y_pred[:, -1, A], dist_class=tempered_categorical,
        entropy_cost=0.01, time_major=False)
    got = loss(pack_targets(**data), y_pred)
    np.testing.assert_allclose(float(got), float(want), rtol=LOSS_RTOL)
    plain = ImpalaLoss(entropy_cost=0.01)(pack_targets(**data), y_pred)
    assert abs(float(plain) - float(got)) > 1e-3  # the temperature mattered
    clone = ImpalaLoss.from_config(loss.get_config())
    assert clone.dist_class is tempered_categorical


def test_fit_with_xla_compiled_train_step():
    """`jit_compile=True` (docs/tutorials/keras.md recommends it on a CPU) trains with
    the metrics on, and the XLA-compiled step evaluates as TF ops with no XLA
    anywhere do (the loss's own XLA call off too), padding in play."""
    obs, data = _batch()
    mask = np.ones((B, T), np.float32)
    mask[1, 3:] = 0.
    y_true = pack_targets(**data, mask=mask)
    model = _model()
    options = dict(reduction="masked_mean", entropy_cost=0.01)
    watched = ["mean_rho", "kl", "entropy"]

    def compiled(jit_compile):
        loss = ImpalaLoss(**options, jit_compile=jit_compile)
        model.compile(keras.optimizers.Adam(0.02), loss=loss, jit_compile=jit_compile,
                      metrics=impala_metrics(loss, watched))
        return model

    history = compiled(True).fit(obs, y_true, batch_size=B, epochs=3, verbose=0).history
    assert all(np.isfinite(history[key]).all() for key in ["loss", *watched])
    xla = compiled(True).evaluate(obs, y_true, batch_size=B, verbose=0, return_dict=True)
    plain = compiled(False).evaluate(obs, y_true, batch_size=B, verbose=0, return_dict=True)
    for key in ["loss", *watched]:
        np.testing.assert_allclose(xla[key], plain[key], rtol=LOSS_RTOL)


def test_many_steps_per_execution_train_as_single_steps():
    """`jit_compile=True, steps_per_execution=N` (docs/tutorials/keras.md's fastest `fit`
    on a CPU: N XLA train steps per call of the train function, in a graph
    loop) makes the same N updates as N plain steps: the weights' changes
    after 4 SGD steps on 4 different batches agree to float32 rounding."""
    steps = 4
    obs, data = _batch(b=steps * B)
    y_true = pack_targets(**data)
    options = dict(reduction="mean", entropy_cost=0.01)

    def weight_changes(jit_compile, steps_per_execution):
        model = _model()
        before = [w.copy() for w in model.get_weights()]
        model.compile(keras.optimizers.SGD(0.1), loss=ImpalaLoss(**options),
                      jit_compile=jit_compile, steps_per_execution=steps_per_execution)
        model.fit(obs, y_true, batch_size=B, epochs=1, shuffle=False, verbose=0)
        return [after - start for after, start in zip(model.get_weights(), before)]

    plain = weight_changes(False, 1)
    fused = weight_changes(True, steps)
    assert all(np.abs(change).max() > 0 for change in plain)  # every weight trained
    for got, want in zip(fused, plain):
        # Each step's gradient is a sum over the loss's 4·B·T + T terms; the
        # steps' rounding adds up over the 4 updates.
        assert_close_to_rounding(got, want, np.float32, steps * (4 * B * T + T))


def test_backup_and_restore_resumes_an_interrupted_fit_exactly(tmp_path):
    import keras_resume
    keras_resume.check_resume_matches_uninterrupted(str(tmp_path / "backup"))


@pytest.mark.parametrize("in_function", [None, "plain", "xla"])
def test_packed_call_matches_the_unpacked_loss_and_gradient(in_function):
    """The one-call path (packed y_true and y_pred, unpacked inside XLA) gives
    the loss and d loss / d y_pred of the unpacked path (dict y_pred, the
    record path of `impala_loss`), with padding (NaN predictions there) and a
    time limit in play; eagerly, in a plain `tf.function` and inside a
    caller's XLA function (a model's `jit_compile` train step), where the
    mask is computed apart from the loops that read it (`_masking`)."""
    _, data = _batch(seed=4)
    rng = np.random.default_rng(4)
    mask = np.ones([B, T], np.float32)
    mask[1, 3:] = 0.
    truncated = np.zeros([B, T], np.float32)
    truncated[2, 1] = 1.
    y_true = pack_targets(**data, mask=mask, truncated=truncated,
                          truncation_values=rng.normal(size=(B, T)).astype(np.float32))
    prediction = rng.normal(size=(B, T + 1, A + 1)).astype(np.float32)
    prediction[1, 4:] = np.nan  # Read by no valid step: V(x_3) is step 2's next.
    y_pred = tf.Variable(prediction)
    options = dict(entropy_cost=0.01, kl_cost=0.1, reduction="masked_mean", lambda_=0.9)
    compiled_loss = ImpalaLoss(**options)

    def loss_and_gradient(packed, loss=compiled_loss):
        with tf.GradientTape() as tape:
            prediction = tf.convert_to_tensor(y_pred)
            if not packed:
                prediction = {"policy_logits": prediction[..., :A],
                              "values": prediction[..., A]}
            value = loss(y_true, prediction)
        return value, tape.gradient(value, y_pred)

    # The reference: eager TF ops, no XLA anywhere.
    loss_value, grad = loss_and_gradient(False, ImpalaLoss(**options, jit_compile=False))
    if in_function:
        loss_and_gradient = tf.function(loss_and_gradient,
                                        jit_compile=in_function == "xla")
    for packed in (True, False):
        got_loss, got_grad = loss_and_gradient(packed)
        assert np.isfinite(float(got_loss)) and np.isfinite(got_grad.numpy()).all()
        np.testing.assert_allclose(float(got_loss), float(loss_value), rtol=LOSS_RTOL)
        np.testing.assert_allclose(got_grad.numpy(), grad.numpy(), rtol=LOSS_RTOL,
                                   atol=LOSS_RTOL * float(tf.reduce_max(tf.abs(grad))))
        if packed:
            assert float(tf.reduce_max(tf.abs(got_grad[1, 4:, :]))) == 0.  # padded steps
