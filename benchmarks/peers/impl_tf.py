"""TensorFlow implementations: tf_vtrace, the fused floor, a plain tf.scan, trfl.

Every `build_*` returns a zero-argument callable that runs one call to
completion (TF on CPU executes synchronously, so the returned EagerTensors are
ready) and returns the framework's outputs; `to_numpy` converts them after
timing. trfl is imported lazily: it lives in .venv-bench-tf only.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from benchmarks import tf_baselines

IW_KEYS = ("log_rhos", "discounts", "rewards", "values", "bootstrap_value")
LOGITS_KEYS = ("behaviour_logits", "target_logits", "actions", "discounts",
               "rewards", "values", "bootstrap_value")


def _tensors(inputs, keys):
    return [tf.constant(inputs[key]) for key in keys]


def to_numpy(outputs):
    return [tensor.numpy() for tensor in outputs]


# ------------------------------------------------------- vtrace functions
# All share tf_baselines' signature: (log_rhos, discounts, rewards, values, bootstrap)
# -> (vs, pg_advantages), so the same workload builders serve every variant.


def preload(name):
    """Import the library behind `name` now, so its import time is not counted
    in the first call (tf_vtrace pulls in tensorflow_probability)."""
    if name.startswith("tf_vtrace"):
        import tf_vtrace  # noqa: F401
    elif name == "trfl":
        import trfl  # noqa: F401


def _tf_vtrace(*args):
    import tf_vtrace

    return tuple(tf_vtrace.from_importance_weights(*args))


def _trfl_vtrace(*args):
    import trfl

    returns = trfl.vtrace_from_importance_weights(*args)
    return returns.vs, returns.pg_advantages


VTRACE_FUNCTIONS = {
    # name: (vtrace function, wrap it in tf.function(jit_compile=?) ourselves)
    "tf_vtrace": (_tf_vtrace, None),  # called eagerly: the library compiles its own kernel
    "tf_vtrace in user plain fn": (_tf_vtrace, False),  # inside the caller's tf.function
    "tf_vtrace in user jit fn": (_tf_vtrace, True),  # inside the caller's XLA function
    "floor": (tf_baselines.floor_pass, True),
    "tf.scan (no XLA)": (tf_baselines.scan_vtrace, False),
    "trfl": (_trfl_vtrace, False),
}


def build_importance_weights(name, inputs):
    if name not in VTRACE_FUNCTIONS:
        return None  # a learner-step-only row
    vtrace_fn, jit_compile = VTRACE_FUNCTIONS[name]
    if jit_compile is not None:
        vtrace_fn = tf.function(vtrace_fn, jit_compile=jit_compile)
    args = _tensors(inputs, IW_KEYS)
    return lambda: vtrace_fn(*args)


def _tf_vtrace_from_logits(*args):
    import tf_vtrace

    returns = tf_vtrace.from_logits(*args)
    return returns.vs, returns.pg_advantages


def build_from_logits(name, inputs):
    """logits -> log_rhos -> V-trace. tf_vtrace is called eagerly as a user would."""
    args = _tensors(inputs, LOGITS_KEYS)
    vtrace_fn, jit_compile = VTRACE_FUNCTIONS[name]
    if name.startswith("tf_vtrace"):
        from_logits = _tf_vtrace_from_logits  # the library's own log-probs (tfp Categorical)
        if jit_compile is not None:
            from_logits = tf.function(from_logits, jit_compile=jit_compile)
        return lambda: from_logits(*args)
    from_logits = tf_baselines.make_from_logits(vtrace_fn, jit_compile=jit_compile)
    return lambda: from_logits(*args)


# The learner step, by how a user writes it (see docs/records/performance.md):
# name -> (builder, jit_compile of the user's own tf.function). A builder
# returns bind(*LOGITS_KEYS tensors) -> a zero-argument call of one step.
def _bind(step):
    return lambda *args: lambda: step(*args)


def _user_step(vtrace_fn):
    return lambda jit_compile: _bind(tf_baselines.make_learner_step(vtrace_fn, jit_compile))


def _library_loss_step(jit_compile, extra_inputs=None, autograph=True,
                       with_diagnostics=True):
    """A training step around the library's own loss, `impala_loss`.

    `extra_inputs(values)` returns more keyword tensors for the loss, built
    once outside the step (e.g. a mask), so that the step's graph sees them
    as inputs as it would a batch's. The step drops the diagnostics; with
    `with_diagnostics=False` it tells the loss so.
    """
    from tf_vtrace.impala import impala_loss

    @tf.function(jit_compile=jit_compile, autograph=autograph)
    def learner_step(behaviour_logits, target_logits, actions, discounts, rewards,
                     values, bootstrap_value, extra):
        with tf.GradientTape() as tape:
            tape.watch([target_logits, values])
            loss, _ = impala_loss(
                behaviour_logits, target_logits, actions, discounts, rewards, values,
                bootstrap_value, baseline_cost=tf_baselines.BASELINE_COST,
                entropy_cost=tf_baselines.ENTROPY_COST, reduction="sum",
                with_diagnostics=with_diagnostics, **extra)
        # Heads may be lists (one head here): loss, d / d logits, d / d values.
        return (loss, *tf.nest.flatten(tape.gradient(loss, [target_logits, values])))

    def bind(*args):
        extra = {} if extra_inputs is None else extra_inputs(args[5])
        return lambda: learner_step(*args, extra)

    return bind


def _all_valid_mask(values):
    return {"mask": tf.ones_like(values, tf.bool)}


def _pipeline_loss_step(jit_compile):
    """The loss call of `tf_vtrace.agent.learner.Learner` (its step less the
    network and Adam): heads as lists, time-limit `truncated` (none here) and
    `truncation_values`, in a `tf.function(autograph=False)` jit-compiled as
    `Config.jit_compile` (default True) says. The costs and the "sum" are
    the workload's, so its outputs compare with the other rows'."""
    def extra_inputs(values):
        return {"truncated": tf.zeros_like(values, tf.bool),
                "truncation_values": tf.zeros_like(values)}

    bind = _library_loss_step(jit_compile, extra_inputs, autograph=False)

    def with_head_lists(behaviour_logits, target_logits, actions, *rest):
        return bind([behaviour_logits], [target_logits], [actions], *rest)

    return with_head_lists


LEARNER_STEPS = {
    "tf_vtrace": (_library_loss_step, False),  # impala_loss in a plain tf.function
    "tf_vtrace impala_loss in jit fn": (_library_loss_step, True),
    "tf_vtrace impala_loss, no diagnostics": (
        lambda jit_compile: _library_loss_step(jit_compile, with_diagnostics=False),
        False),
    "tf_vtrace impala_loss, all-true mask": (
        lambda jit_compile: _library_loss_step(jit_compile, _all_valid_mask), False),
    "tf_vtrace pipeline loss call": (_pipeline_loss_step, True),
    "tf_vtrace in user plain fn": (_user_step(_tf_vtrace), False),
    "tf_vtrace in user jit fn": (_user_step(_tf_vtrace), True),
    # The floor runs the user's step under XLA; trfl and tf.scan in a plain
    # tf.function, as in the scalable_agent lineage they come from.
    "floor": (_user_step(tf_baselines.floor_pass), True),
    "tf.scan (no XLA)": (_user_step(tf_baselines.scan_vtrace), False),
    "trfl": (_user_step(_trfl_vtrace), False),
}


def build_learner_step(name, inputs):
    """IMPALA learner step: logits -> log-probs -> V-trace -> loss -> gradients."""
    if name in KERAS_STEPS:
        # The Keras that tf.keras is: tf_keras in a worker started with
        # TF_USE_LEGACY_KERAS=1 (run_peers.WORKER_ENV), else Keras 3.
        jit_compile, steps_per_execution = KERAS_STEPS[name]
        return _KerasStep(inputs, jit_compile, steps_per_execution,
                          legacy_sgd=name.endswith(LEGACY_SGD))
    make_step, jit_compile = LEARNER_STEPS[name]
    return make_step(jit_compile)(*_tensors(inputs, LOGITS_KEYS))


# Keras `fit` rows -> the model's `jit_compile` (None: Keras' default, which
# on a CPU-only machine compiles no XLA for the train step) and
# `steps_per_execution` (train steps per call of the train function; the
# worker reports the time per step).
KERAS_STEPS = {
    "tf_vtrace ImpalaLoss in fit": (None, 1),
    "tf_vtrace ImpalaLoss in tf_keras fit": (None, 1),
    "tf_vtrace ImpalaLoss in jit fit": (True, 1),
    "tf_vtrace ImpalaLoss in tf_keras jit fit": (True, 1),
    "tf_vtrace ImpalaLoss in fit, 16 steps per call": (None, 16),
    "tf_vtrace ImpalaLoss in jit fit, 16 steps per call": (True, 16),
    "tf_vtrace ImpalaLoss in tf_keras jit fit, 16 steps per call": (True, 16),
    "tf_vtrace ImpalaLoss in tf_keras jit fit, 16 steps per call, legacy SGD":
        (True, 16),
}
# The row suffix for tf_keras' `optimizers.legacy.SGD`: plain SGD in one pass
# over the variable (`ResourceApplyGradientDescent`), as Keras 3's SGD without
# momentum and rlax's step; tf_keras' current SGD always keeps and updates a
# momentum slot, a second pass.
LEGACY_SGD = ", legacy SGD"


class _KerasStep:
    """One Keras `fit` step of `ImpalaLoss`, as `fit` runs it (Keras 3, or
    tf_keras under TF_USE_LEGACY_KERAS=1), compiled with Keras' defaults or
    with `jit_compile=True` (the whole train step as one XLA program).

    The model's output is one variable holding the packed predictions
    [B, T + 1, A + 1] (π's logits and V for T + 1 observations, the last value
    the bootstrap), so d loss / d variable is the gradient with respect to the
    logits and the values. A call runs the model's train function on the next
    batch of a repeating dataset, optimizer update (SGD, rate 0) included; with
    `steps_per_execution` N, on the next N batches in one call (`steps_per_call`:
    the worker reports the time per step). The
    outputs compared with the other rows are the loss and that gradient,
    taken once through the same loss object.
    """

    def __init__(self, inputs, jit_compile=None, steps_per_execution=1,
                 legacy_sgd=False):
        from tf_vtrace.keras import ImpalaLoss, keras, pack_targets

        batch_major = {k: tf.transpose(tf.constant(inputs[k]), [1, 0, 2] if
                                       inputs[k].ndim == 3 else [1, 0])
                       for k in LOGITS_KEYS if inputs[k].ndim >= 2}
        T = inputs["values"].shape[0]
        num_actions = inputs["target_logits"].shape[-1]
        logits = tf.concat([batch_major["target_logits"],
                            tf.zeros_like(batch_major["target_logits"][:, :1])], 1)
        values = tf.concat([batch_major["values"],
                            tf.constant(inputs["bootstrap_value"])[:, None]], 1)
        y_pred = tf.concat([logits, values[..., None]], -1)
        y_true = pack_targets(batch_major["actions"], batch_major["rewards"],
                              batch_major["discounts"], batch_major["behaviour_logits"])
        self.loss = ImpalaLoss(baseline_cost=tf_baselines.BASELINE_COST,
                               entropy_cost=tf_baselines.ENTROPY_COST, reduction="sum")

        class Predictions(keras.layers.Layer):
            def build(self, input_shape):
                self.packed = self.add_weight(shape=y_pred.shape, initializer="zeros")
                self.packed.assign(y_pred)

            def call(self, x):
                return self.packed + 0. * x[:, :1, None]

        x = tf.zeros([y_pred.shape[0], 1])
        model = keras.Sequential([keras.Input((1,)), Predictions()])
        compile_args = {} if jit_compile is None else {"jit_compile": jit_compile}
        sgd = (keras.optimizers.legacy.SGD if legacy_sgd
               else keras.optimizers.SGD)
        model.compile(optimizer=sgd(0.0), loss=self.loss,
                      steps_per_execution=steps_per_execution, **compile_args)
        self.steps_per_call = steps_per_execution
        model.make_train_function()
        dataset = tf.data.Dataset.from_tensors((x, y_true)).repeat()
        self.iterator = iter(dataset)
        self.model, self.y_true, self.y_pred, self.T, self.A = (
            model, y_true, y_pred, T, num_actions)

    def __call__(self):
        return self.model.train_function(self.iterator)

    def comparison_outputs(self):
        """What the worker saves for max|diff| instead of the train logs."""
        y_pred = tf.Variable(self.y_pred)
        with tf.GradientTape() as tape:
            loss = self.loss(self.y_true, y_pred)
        grad = tf.transpose(tape.gradient(loss, y_pred)[:, :self.T], [1, 0, 2])
        return loss, grad[..., :self.A], grad[..., self.A]


BUILDERS = {
    "importance_weights": build_importance_weights,
    "from_logits": build_from_logits,
    "learner_step": build_learner_step,
}
