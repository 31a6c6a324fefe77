"""Export V-trace targets and the IMPALA loss as a SavedModel and reload it.

    python examples/export_savedmodel.py [EXPORT_DIR]

Saves `tf_vtrace.export.VTraceModule` (signatures with unknown time, batch and
action dims), loads it back with `tf.saved_model.load` in a fresh Python
process that imports neither tf_vtrace nor TensorFlow Probability, and prints
the largest difference between the live and the restored outputs.
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from tf_vtrace.export import VTraceModule

RELOAD = """
import sys, numpy as np, tensorflow as tf
loaded = tf.saved_model.load(sys.argv[1])
data = dict(np.load(sys.argv[2]))
out = {k: v.numpy() for k, v in loaded.loss(**data).items()}
out.update({"vs": loaded.vtrace_targets(**data)["vs"].numpy()})
np.savez(sys.argv[3], **out)
"""


def example_inputs(t=20, b=8, a=4, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((t, b), np.float32)
    mask[t // 2:, 0] = 0.  # a shorter unroll, padded
    return dict(
        behaviour_policy_logits=rng.normal(size=(t, b, a)).astype(np.float32),
        target_policy_logits=rng.normal(size=(t, b, a)).astype(np.float32),
        actions=rng.integers(0, a, (t, b)).astype(np.int32),
        discounts=np.full((t, b), 0.99, np.float32),
        rewards=rng.normal(size=(t, b)).astype(np.float32),
        values=rng.normal(size=(t, b)).astype(np.float32),
        bootstrap_value=rng.normal(size=b).astype(np.float32),
        mask=mask, truncated=np.zeros((t, b), np.float32),
        truncation_values=np.zeros((t, b), np.float32))


def main(export_dir):
    module = VTraceModule(entropy_cost=0.01, reduction="masked_mean", lambda_=0.95)
    tf.saved_model.save(module, export_dir, signatures=module.signatures())
    inputs = example_inputs()
    with tempfile.TemporaryDirectory() as scratch:
        data, out = os.path.join(scratch, "in.npz"), os.path.join(scratch, "out.npz")
        np.savez(data, **inputs)
        subprocess.run([sys.executable, "-c", RELOAD, export_dir, data, out],
                       check=True)
        restored = dict(np.load(out))
    live = {k: v.numpy() for k, v in module.loss(**inputs).items()}
    live["vs"] = module.vtrace_targets(**inputs)["vs"].numpy()
    diff = max(float(np.max(np.abs(live[k] - restored[k]))) for k in live)
    print(f"saved to {export_dir}; loss {live['loss']:.5f}; "
          f"max |live - reloaded in a fresh process| = {diff}")
    return diff


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="vtrace_"))
