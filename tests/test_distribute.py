"""MirroredStrategy over two logical CPU devices gives the one-device gradients.

Logical devices must be configured before TensorFlow initializes its runtime,
so the check runs in a subprocess. The two replicas get different numbers of
valid (unmasked) steps, so a per-replica mean would be wrong for
``"masked_mean"``: the loss must divide by the global count.
"""
import os
import subprocess
import sys
import textwrap

from tolerances import SUBPROCESS_TIMEOUT_S

SCRIPT = textwrap.dedent("""
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from tf_vtrace.impala import impala_loss
    from tf_vtrace.keras import ImpalaLoss, pack_targets

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

    def build():
        keras.utils.set_random_seed(1)
        inp = keras.Input((None, OBS))
        hidden = keras.layers.Dense(8, activation="tanh")(inp)
        out = keras.layers.Concatenate()(
            [keras.layers.Dense(A)(hidden), keras.layers.Dense(1)(hidden)])
        return keras.Model(inp, out)

    def loss_fn(model, obs, batch, reduction, cross_replica=True):
        y = model(obs)
        return impala_loss(
            batch["behaviour_policy_logits"], y[:, :-1, :A], batch["actions"],
            batch["discounts"], batch["rewards"], y[:, :-1, A], y[:, -1, A],
            mask=batch["mask"], entropy_cost=0.01, kl_cost=0.1,
            reduction=reduction, time_major=False, cross_replica=cross_replica)[0]

    single = build()
    with strategy.scope():
        mirrored = build()
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
            if scope is None:
                model = build()
            else:
                with strategy.scope():
                    model = build()
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


def test_mirrored_strategy_matches_one_device(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                            capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0 and "DISTRIBUTE_OK" in result.stdout, (
        result.stdout + result.stderr[-5000:])
    print(result.stdout)
