"""The SavedModel module: saved here, loaded in a fresh process, same numbers."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from tolerances import SUBPROCESS_TIMEOUT_S, rtol_for

from tf_vtrace.export import VTraceModule
from tf_vtrace.impala import impala_loss

A = 4


def _inputs(t, b, seed):
    rng = np.random.default_rng(seed)
    mask = np.ones((t, b), np.float32)
    mask[t - 2:, 0] = 0.
    truncated = np.zeros((t, b), np.float32)
    truncated[1, -1] = 1.
    return [
        rng.normal(0, 2, (t, b, A)).astype(np.float32),
        rng.normal(0, 2, (t, b, A)).astype(np.float32),
        (np.arange(t * b).reshape(t, b) % A).astype(np.int32),
        np.full((t, b), 0.9, np.float32),
        rng.normal(size=(t, b)).astype(np.float32),
        rng.normal(size=(t, b)).astype(np.float32),
        rng.normal(size=(b,)).astype(np.float32),
        mask, truncated, rng.normal(size=(t, b)).astype(np.float32)]


NAMES = ["behaviour_policy_logits", "target_policy_logits", "actions",
         "discounts", "rewards", "values", "bootstrap_value", "mask",
         "truncated", "truncation_values"]

LOADER = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    path, data_path, out_path = sys.argv[1:]
    data = np.load(data_path)
    loaded = tf.saved_model.load(path)
    assert "tf_vtrace" not in sys.modules
    results = {}
    for shape in ("a", "b"):
        args = [data[f"{shape}_{i}"] for i in range(10)]
        for key, value in loaded.vtrace_targets(*args).items():
            results[f"{shape}_targets_{key}"] = value.numpy()
        for key, value in loaded.loss(*args).items():
            results[f"{shape}_loss_{key}"] = value.numpy()
        kwargs = {name: tf.constant(a) for name, a in zip(%r, args)}
        signature = loaded.signatures["loss"](**kwargs)
        results[f"{shape}_signature_loss"] = signature["loss"].numpy()
    np.savez(out_path, **results)
""" % (NAMES,))  # noqa: UP031 (the template is Python source: {} would need escaping)


def test_fresh_process_gives_the_live_numbers(tmp_path):
    module = VTraceModule(entropy_cost=0.01, kl_cost=0.1, reduction="masked_mean",
                          pg_target="lambda_returns", lambda_=0.9,
                          clip_rho_threshold=1.5, alpha_=0.7)
    path = str(tmp_path / "vtrace_module")
    tf.saved_model.save(module, path, signatures=module.signatures())
    shapes = {"a": _inputs(7, 3, 0), "b": _inputs(4, 5, 1)}  # T, B both vary
    np.savez(tmp_path / "data.npz", **{f"{s}_{i}": a for s, args in shapes.items()
                                       for i, a in enumerate(args)})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(
        [sys.executable, "-c", LOADER, path, str(tmp_path / "data.npz"),
         str(tmp_path / "out.npz")], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-5000:]
    fresh = np.load(tmp_path / "out.npz")
    max_diff = 0.
    for shape, args in shapes.items():
        live_targets = module.vtrace_targets(*args)
        live_loss = module.loss(*args)
        for key, value in live_targets.items():
            np.testing.assert_array_equal(fresh[f"{shape}_targets_{key}"], value)
        for key, value in live_loss.items():
            np.testing.assert_array_equal(fresh[f"{shape}_loss_{key}"], value)
            max_diff = max(max_diff, abs(float(fresh[f"{shape}_loss_{key}"] - value)))
        np.testing.assert_array_equal(fresh[f"{shape}_signature_loss"],
                                      live_loss["loss"])
        # And the live module is the functional loss.
        want, _ = impala_loss(*args[:7], **dict(zip(NAMES[7:], args[7:])),
                              entropy_cost=0.01, kl_cost=0.1,
                              reduction="masked_mean", pg_target="lambda_returns",
                              lambda_=0.9, clip_rho_threshold=1.5, alpha_=0.7)
        # Other ops in another order (one compiled signature against the
        # eager function), float32: four signed terms per step over T·B steps.
        steps, batch = args[5].shape
        np.testing.assert_allclose(live_loss["loss"], want,
                                   rtol=rtol_for(np.float32, 4 * steps * batch + steps))
    assert max_diff == 0.


def test_signatures_leave_time_batch_and_actions_unknown():
    function = VTraceModule().signatures()["vtrace_targets"]
    specs = {s.name: s for s in function.structured_input_signature[0]}
    assert list(specs) == NAMES
    assert specs["behaviour_policy_logits"].shape.as_list() == [None, None, None]
    assert specs["rewards"].shape.as_list() == [None, None]
    assert specs["bootstrap_value"].shape.as_list() == [None]


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match="`reduction` must be one of"):
        VTraceModule(reduction="total")


# --- export_policy: bad models and arguments are named -------------------------


def _functional(value_output, extra_outputs=()):
    import keras
    x = keras.Input((4,))
    logits = keras.layers.Dense(3)(x)
    value = keras.layers.Dense(1)(x)
    outputs = {"value [N]": [logits, keras.layers.Reshape(())(value)],
               "value [N, 1]": [logits, value],
               "logits alone": logits}[value_output]
    return keras.Model(x, outputs)


def _subclassed():
    import keras

    class Policy(keras.Model):
        def __init__(self):
            super().__init__()
            self.logits, self.value = keras.layers.Dense(3), keras.layers.Dense(1)

        def call(self, observations):
            return self.logits(observations), tf.squeeze(self.value(observations), -1)

    model = Policy()
    model(np.zeros([1, 4], np.float32))  # Built, but still no symbolic outputs.
    return model


@pytest.mark.parametrize("make_model, error, match", [
    (lambda: None, TypeError, r"`model` must be a Keras model with known inputs.*NoneType"),
    (_subclassed, TypeError, r"got Policy, which has none: .*keras.Model\(x, model\(x\)\)"),
    (lambda: _functional("logits alone"), ValueError,
     r"must output \[logits \[N, Σ A_h\], value \[N\]\]; .*\[\(None, 3\)\]"),
    (lambda: _functional("value [N, 1]"), ValueError,
     r"\[\(None, 3\), \(None, 1\)\] \(a value of shape \[N, 1\] needs "
     r"keras.layers.Reshape"),
])
def test_export_policy_names_a_model_of_another_layout(tmp_path, make_model, error,
                                                       match):
    from tf_vtrace.export import export_policy
    with pytest.raises(error, match=match):
        export_policy(make_model(), tmp_path / "policy")
    assert not (tmp_path / "policy").exists()


@pytest.mark.parametrize("head_sizes", [(3, 0), (4, -1), (2,), (1.5, 1.5), ("3",)])
def test_export_policy_refuses_head_sizes_that_are_not_the_logits(tmp_path, head_sizes):
    from tf_vtrace.export import export_policy
    with pytest.raises(ValueError, match=r"`head_sizes` .* must be integers >= 1 "
                                         r"that sum to the model's 3 logits"):
        export_policy(_functional("value [N]"), tmp_path / "policy", head_sizes)


def test_export_policy_names_metadata_that_json_cannot_hold(tmp_path):
    from tf_vtrace.export import export_policy
    with pytest.raises(TypeError, match=r"`metadata` must be JSON-serializable: .*ndarray"):
        export_policy(_functional("value [N]"), tmp_path / "policy",
                      metadata={"returns": np.zeros(2)})


def test_a_wrapped_subclassed_model_exports_with_numpy_head_sizes(tmp_path):
    import keras

    from tf_vtrace.export import export_policy
    x = keras.Input((4,))
    model = keras.Model(x, _subclassed()(x))
    policy = tf.saved_model.load(export_policy(model, tmp_path / "policy",
                                               np.array([1, 2])))
    out = policy.act(np.ones([5, 4], np.float32))
    assert out["value"].shape == [5] and out["greedy_action"].shape == [5, 2]
    assert policy.head_sizes.numpy().tolist() == [1, 2]
    expected_logits, expected_value = model(np.ones([5, 4], np.float32))
    # A Dense layer over 4 inputs of 1: 4 weights (|w| < 1, Glorot) and a
    # zero bias summed, so the rounding is relative to 4, not to the result.
    for key, expected in (("logits", expected_logits), ("value", expected_value)):
        np.testing.assert_allclose(out[key], expected, rtol=0,
                                   atol=4 * rtol_for(np.float32, 5))
