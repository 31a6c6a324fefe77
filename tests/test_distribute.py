"""MirroredStrategy over two logical CPU devices gives the one-device gradients
and, in Keras `fit`/`evaluate`, the one-device reported loss.

Logical devices must be configured before TensorFlow initializes its runtime,
so the checks run in subprocesses. The two replicas get different numbers of
valid (unmasked) steps, so a per-replica mean would be wrong for
``"masked_mean"``: the loss must divide by the global count.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tolerances import SUBPROCESS_TIMEOUT_S, assert_close_to_rounding, rtol_for

# Two replicas, a batch of 8 unrolls whose first half is mostly padding, and
# the model; `keras` is the one tf_vtrace uses (tf_keras under
# TF_USE_LEGACY_KERAS=1).
SETUP = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tf_vtrace.impala import impala_loss
    from tf_vtrace.keras import (ImpalaLoss, impala_metrics, keras, pack_targets,
                                 unpack_predictions)

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    B, T, A, OBS = 8, 6, 3, 4
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(B, T + 1, OBS)).astype(np.float32)
    mask = np.ones((B, T), np.float32)
    mask[:4, 2:] = 0.  # the first replica's half is mostly padding
    data = dict(actions=(np.arange(B * T).reshape(B, T) % A).astype(np.int32),
                rewards=rng.normal(size=(B, T)).astype(np.float32),
                discounts=np.full((B, T), 0.9, np.float32),
                behaviour_policy_logits=rng.normal(0, 2, (B, T, A)).astype(np.float32),
                mask=mask)

    def build(scope=None):
        keras.utils.set_random_seed(1)
        if scope is not None:
            with scope.scope():
                return build()
        inp = keras.Input((None, OBS))
        hidden = keras.layers.Dense(8, activation="tanh")(inp)
        out = keras.layers.Concatenate()(
            [keras.layers.Dense(A)(hidden), keras.layers.Dense(1)(hidden)])
        return keras.Model(inp, out)
""")

SCRIPT = SETUP + textwrap.dedent("""
    def loss_fn(model, obs, batch, reduction, cross_replica=True):
        y = model(obs)
        return impala_loss(
            batch["behaviour_policy_logits"], y[:, :-1, :A], batch["actions"],
            batch["discounts"], batch["rewards"], y[:, :-1, A], y[:, -1, A],
            mask=batch["mask"], entropy_cost=0.01, kl_cost=0.1,
            reduction=reduction, time_major=False, cross_replica=cross_replica)[0]

    single = build()
    mirrored = build(strategy)
    mirrored.set_weights(single.get_weights())
    dataset = tf.data.Dataset.from_tensor_slices((obs, data)).batch(B)
    worst = {}
    # The last case is a control: per-replica masked means (no all-reduce of
    # the count) must differ, or this test could not fail.
    for reduction, cross_replica in (("sum", True), ("mean", True),
                                     ("masked_mean", True), ("masked_mean", False)):
        with tf.GradientTape() as tape:
            loss = loss_fn(single, obs, data, reduction)
        want = tape.gradient(loss, single.trainable_variables)

        @tf.function
        def replica_step(obs, batch):
            with tf.GradientTape() as tape:
                loss = loss_fn(mirrored, obs, batch, reduction, cross_replica)
            return tape.gradient(loss, mirrored.trainable_variables)

        for obs_d, batch_d in strategy.experimental_distribute_dataset(dataset):
            per_replica = strategy.run(replica_step, args=(obs_d, batch_d))
        got = [strategy.reduce("SUM", g, axis=None) for g in per_replica]
        diff = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
        scale = max(float(np.max(np.abs(w))) for w in want)
        if cross_replica:
            worst[reduction] = diff
            assert diff < 1e-5 * max(scale, 1.), (reduction, diff, scale)
        else:
            assert diff > 1e-2 * scale, ("control", diff, scale)
            print("CONTROL_PER_REPLICA_MEAN_DIFF", diff)
    print("CUSTOM_LOOP_MAX_GRAD_DIFF", worst)

    # Keras fit: one SGD step on the same global batch, then compare weights.
    y_true = pack_targets(**data)
    for reduction in ("masked_mean",):  # the custom loop covers the others
        models = []
        for scope in (None, strategy):
            model = build(scope)
            model.compile(keras.optimizers.SGD(0.1), loss=ImpalaLoss(
                entropy_cost=0.01, reduction=reduction))
            model.fit(obs, y_true, batch_size=B, epochs=1, shuffle=False, verbose=0)
            models.append(model)
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(
            models[0].get_weights(), models[1].get_weights()))
        moved = max(float(np.max(np.abs(a - b))) for a, b in zip(
            models[0].get_weights(), build().get_weights()))
        assert moved > 1e-3 and diff < 1e-6, (reduction, diff, moved)
        print("KERAS_FIT_MAX_WEIGHT_DIFF", reduction, diff, "step", moved)
    print("DISTRIBUTE_OK")
""")


# Batches of 4 over two replicas: evaluating 7 unrolls ends on a batch of 3
# (split 2 / 1), fitting 5 ends on a batch of 1 (one replica empty). The first
# batch splits evenly: Keras 3 builds its metrics on the first batch by a
# cross-replica MEAN of the data, which fails on unequal shapes.
PARTIAL_SCRIPT = SETUP + textwrap.dedent("""
    import json, sys
    reduction, BATCH = sys.argv[1], 4
    y_true = pack_targets(**data)
    COSTS = dict(entropy_cost=0.01, kl_cost=0.1, reduction=reduction)
    METRICS = ("baseline_loss", "mean_rho")  # a loss term, a masked mean

    def reference(model, n):
        # Σ_k b_k L_k / Σ_k b_k: the one-device epoch loss, L_k the float64
        # whole-batch loss of batch k of b_k unrolls.
        y = unpack_predictions(tf.cast(model(obs[:n]), tf.float64))
        logits, values = y["policy_logits"][0], y["values"]
        total = 0.
        for k in range(0, n, BATCH):
            b = slice(k, min(n, k + BATCH))
            f64 = {key: np.float64(v[b]) for key, v in data.items() if key != "actions"}
            total += float(impala_loss(
                f64["behaviour_policy_logits"], logits[b, :-1], data["actions"][b],
                f64["discounts"], f64["rewards"], values[b, :-1], values[b, -1],
                mask=f64["mask"], time_major=False, **COSTS)[0]) * len(obs[b])
        return total / n

    out = {}
    for name, scope in (("one", None), ("mirrored", strategy)):
        model = build(scope)
        with (scope or tf.distribute.get_strategy()).scope():  # tf_keras wants
            loss = ImpalaLoss(**COSTS)  # the metrics in the model's scope
            model.compile(keras.optimizers.SGD(0.05), loss=loss,
                          metrics=impala_metrics(loss, METRICS))
        evaluated = [model.evaluate(obs[:n], y_true[:n], batch_size=BATCH,
                                    verbose=0, return_dict=True) for n in (7, 5)]
        out[name] = dict(
            evaluate=[logs.pop("loss") for logs in evaluated], metrics=evaluated,
            reference=[reference(model, n) for n in (7, 5)],
            fit=model.fit(obs[:5], y_true[:5], batch_size=BATCH, epochs=2,
                          shuffle=False, verbose=0).history["loss"],
            weights=[w.ravel().tolist() for w in model.get_weights()])
    out["initial"] = [w.ravel().tolist() for w in build().get_weights()]
    print("PARTIAL_BATCH_RESULT", json.dumps(out))
""")


def _run(script, cwd, *args, legacy_keras=False):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if legacy_keras:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return subprocess.run([sys.executable, "-c", script, *args], cwd=cwd,
                          env=env, capture_output=True, text=True,
                          timeout=SUBPROCESS_TIMEOUT_S)


def test_mirrored_strategy_matches_one_device(tmp_path):
    result = _run(SCRIPT, tmp_path)
    assert result.returncode == 0 and "DISTRIBUTE_OK" in result.stdout, (
        result.stdout + result.stderr[-5000:])
    print(result.stdout)


@pytest.mark.parametrize("reduction,legacy_keras", [
    ("sum", False), ("mean", False), ("masked_mean", False), ("sum", True)])
def test_partial_batch_reports_the_one_device_loss(tmp_path, reduction,
                                                   legacy_keras):
    """The reported loss of `evaluate` and `fit`, the `ImpalaMetric`s and the
    `fit` steps under two replicas equal one device's (the loss also the
    float64 reference) when the last batch splits unequally or leaves a
    replica empty (issue 24, item 8)."""
    result = _run(PARTIAL_SCRIPT, tmp_path, reduction, legacy_keras=legacy_keras)
    lines = [line for line in result.stdout.splitlines()
             if line.startswith("PARTIAL_BATCH_RESULT ")]
    assert result.returncode == 0 and lines, result.stdout + result.stderr[-5000:]
    out = json.loads(lines[0].split(" ", 1)[1])
    one, mirrored = out["one"], out["mirrored"]
    print(reduction, "legacy" if legacy_keras else "keras3", one["evaluate"],
          mirrored["evaluate"], one["reference"], one["fit"], mirrored["fit"])
    # 4 signed terms per step over up to 4 · 6 steps, each from a 6-step recursion.
    n_reduced = 4 * 4 * 6 + 6
    for got, name in ((one, "one device"), (mirrored, "mirrored")):
        assert_close_to_rounding(got["evaluate"], one["reference"], np.float32,
                                 n_reduced, err_msg=f"evaluate, {name}")
    assert_close_to_rounding(mirrored["fit"], one["fit"], np.float32, n_reduced,
                             err_msg="fit's reported loss")
    for got, want in zip(mirrored["metrics"], one["metrics"]):
        assert sorted(got) == sorted(want) and len(want) == 2, (got, want)
        for key in want:
            assert_close_to_rounding(got[key], want[key], np.float32, n_reduced,
                                     err_msg=f"ImpalaMetric {key}")
    rtol = rtol_for(np.float32, n_reduced)
    flat = {key: np.concatenate([np.asarray(w) for w in weights])
            for key, weights in (("one", one["weights"]),
                                 ("mirrored", mirrored["weights"]),
                                 ("initial", out["initial"]))}
    moved = np.abs(flat["one"] - flat["initial"]).max()
    diff = np.abs(flat["mirrored"] - flat["one"]).max()
    assert moved > 1e-3 and diff < rtol * moved, (moved, diff)


# The agent's `tf_vtrace.agent.distribute` on two logical CPUs: each replica
# gets its own half of the envs (axis 1; axis 0 of the core state), and an
# env count the replicas do not divide is refused with the field's name.
AGENT_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tf_vtrace.agent import distribute
    from tf_vtrace.agent.config import Config

    strategy = distribute.make_strategy(Config(strategy="mirrored"))
    assert distribute.local_replicas(strategy, 4) == 2
    assert distribute.local_replicas(None, 3) == 1
    try:
        distribute.local_replicas(strategy, 3)
    except ValueError as error:
        assert "Config.num_envs" in str(error), error
    else:
        raise AssertionError("3 envs on 2 replicas were accepted")
    T, B = 3, 4
    unroll = {"rewards": np.arange(T * B, dtype=np.float32).reshape(T, B),
              "initial_core_state": np.arange(B * 2 * 5, dtype=np.float32
                                              ).reshape(B, 2, 5)}
    inputs = distribute.distributed_inputs(strategy, unroll, list(unroll))
    for replica, (rewards, state) in enumerate(zip(
            *(strategy.experimental_local_results(x) for x in inputs))):
        envs = slice(replica * 2, replica * 2 + 2)
        np.testing.assert_array_equal(rewards, unroll["rewards"][:, envs])
        np.testing.assert_array_equal(state, unroll["initial_core_state"][envs])
    print("AGENT_DISTRIBUTE_OK")
""")


def test_agent_distribute_slices_envs_per_replica(tmp_path):
    result = _run(AGENT_SCRIPT, tmp_path)
    assert result.returncode == 0 and "AGENT_DISTRIBUTE_OK" in result.stdout, (
        result.stdout + result.stderr[-5000:])
