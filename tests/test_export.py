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
