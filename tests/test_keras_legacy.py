"""tf_keras (Keras 2): `TF_USE_LEGACY_KERAS=1` must be set before TensorFlow is
imported and holds for the whole process, so this runs in a subprocess."""
import os
import subprocess
import sys
import textwrap

from tolerances import SUBPROCESS_TIMEOUT_S

TESTS = os.path.dirname(os.path.abspath(__file__))


def _run_under_tf_keras(script_and_args, cwd):
    """`python -c SCRIPT ARGS...` in a process where tf.keras is tf_keras."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", *script_and_args], cwd=cwd,
                          env=env, capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S)


SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import tensorflow as tf
    import tf_keras
    assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
    from tf_vtrace.impala import impala_loss
    from tf_vtrace.keras import (ImpalaLoss, VTrace, impala_metrics, keras,
                                 pack_targets)
    from tolerances import rtol_for
    assert keras is tf_keras

    B, T, A, OBS = 6, 5, 3, 4
    # A float32 loss computed two ways (compiled against uncompiled, a fit
    # step against a call): four signed terms per step over B·T steps, each
    # from a T-step recursion. (1e-6 here once failed by 3.4e-6.)
    LOSS_RTOL = rtol_for(np.float32, 4 * B * T + T)
    rng = np.random.default_rng(0)
    data = dict(actions=np.arange(B * T).reshape(B, T) % A,
                rewards=rng.normal(size=(B, T)), discounts=np.full((B, T), .9),
                behaviour_policy_logits=rng.normal(0, 2, (B, T, A)))
    obs = rng.normal(size=(B, T + 1, OBS)).astype(np.float32)
    y_true = pack_targets(**data)

    tf_keras.utils.set_random_seed(0)  # (tf.random.set_seed leaves tf_keras'
    inp = tf_keras.Input((None, OBS))   # initializers to Python's `random`)
    hidden = tf_keras.layers.Dense(16, activation="tanh")(inp)
    out = tf_keras.layers.Concatenate()(
        [tf_keras.layers.Dense(A)(hidden), tf_keras.layers.Dense(1)(hidden)])
    model = tf_keras.Model(inp, out)
    loss = ImpalaLoss(entropy_cost=0.01, reduction="mean")
    y_pred = model(obs)
    want, diagnostics = impala_loss(
        data["behaviour_policy_logits"].astype(np.float32), y_pred[:, :-1, :A],
        data["actions"], data["discounts"].astype(np.float32),
        data["rewards"].astype(np.float32), y_pred[:, :-1, A], y_pred[:, -1, A],
        entropy_cost=0.01, reduction="mean", time_major=False)
    # The loss is a sum of signed terms that can cancel to near 0 (0.00049 was
    # seen): its rounding error is relative to the terms, not to their sum.
    LOSS_ATOL = LOSS_RTOL * sum(abs(float(diagnostics[k])) for k in (
        "policy_loss", "baseline_loss", "entropy_loss"))
    np.testing.assert_allclose(float(loss(y_true, y_pred)), float(want),
                               rtol=LOSS_RTOL, atol=LOSS_ATOL)

    # One step of fit equals one step by hand (eager tape, same optimizer): the
    # compiled loss's gradient reaches tf_keras' train function intact.
    initial = model.get_weights()
    by_hand = tf_keras.models.clone_model(model)
    by_hand.set_weights(initial)
    with tf.GradientTape() as tape:
        loss_before = loss(y_true, by_hand(obs, training=True))
    gradients = tape.gradient(loss_before, by_hand.trainable_variables)
    tf_keras.optimizers.Adam(0.02).apply_gradients(
        zip(gradients, by_hand.trainable_variables))
    model.compile(tf_keras.optimizers.Adam(0.02), loss=loss,
                  metrics=impala_metrics(loss, ["mean_rho", "baseline_loss"]))
    history = model.fit(obs, y_true, batch_size=B, epochs=1, shuffle=False,
                        verbose=0).history
    np.testing.assert_allclose(history["loss"][0], float(loss_before),
                               rtol=LOSS_RTOL, atol=LOSS_ATOL)
    for fitted, manual, start in zip(model.get_weights(), by_hand.get_weights(),
                                     initial):
        assert np.abs(fitted - start).max() > 1e-3  # the step moved every weight
        # Adam's first step is lr·g/(|g| + ε) per weight: a rounding error δ
        # (relative) in g moves it by ≤ lr·δ ≈ 0.02·LOSS_RTOL = 3e-7, a wrong
        # gradient by up to 2·lr = 0.04; the tolerance sits between.
        np.testing.assert_allclose(fitted, manual, rtol=1e-4, atol=1e-5)
    history = model.fit(obs, y_true, batch_size=B, epochs=5, verbose=0).history
    assert np.isfinite(history["mean_rho"]).all()
    assert np.isfinite(history["baseline_loss"]).all()

    model.save("m.keras")
    loaded = tf_keras.models.load_model("m.keras", safe_mode=True)
    assert loaded.loss.get_config() == loss.get_config()
    np.testing.assert_allclose(loaded.evaluate(obs, y_true, verbose=0)[0],
                               model.evaluate(obs, y_true, verbose=0)[0],
                               rtol=LOSS_RTOL, atol=LOSS_ATOL)

    layer = VTrace(lambda_=0.9)
    targets = layer(data["behaviour_policy_logits"].astype(np.float32),
                    y_pred[:, :-1, :A], data["actions"],
                    data["discounts"].astype(np.float32),
                    data["rewards"].astype(np.float32), y_pred[..., A])
    assert targets["vs"].shape == (B, T)
    assert VTrace.from_config(layer.get_config()).lambda_ == 0.9

    # Two outputs [logits, value]: tf_keras hands the loss each output alone;
    # the error blames `y_pred` and names the concatenation.
    two_outputs = tf_keras.Model(inp, [tf_keras.layers.Dense(A)(hidden),
                                       tf_keras.layers.Dense(1)(hidden)])
    two_outputs.compile("sgd", loss=ImpalaLoss())
    try:
        two_outputs.fit(obs, y_true, verbose=0)
    except ValueError as error:
        assert "Concatenate()([logits, value])" in str(error), error
    else:
        raise AssertionError("a model with two outputs trained")
    print("LEGACY_OK", float(loss_before), history["loss"][-1])
""")


def test_loss_metrics_layer_and_saving_under_tf_keras(tmp_path):
    result = _run_under_tf_keras([SCRIPT, TESTS], tmp_path)
    assert result.returncode == 0 and "LEGACY_OK" in result.stdout, (
        result.stdout + result.stderr[-5000:])


RESUME_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import tensorflow as tf
    assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
    import keras_resume
    keras_resume.check_resume_matches_uninterrupted("backup")
    print("RESUME_OK")
""")


def test_backup_and_restore_resumes_an_interrupted_fit_exactly_under_tf_keras(tmp_path):
    result = _run_under_tf_keras([RESUME_SCRIPT, TESTS], tmp_path)
    assert result.returncode == 0 and "RESUME_OK" in result.stdout, (
        result.stdout + result.stderr[-5000:])
