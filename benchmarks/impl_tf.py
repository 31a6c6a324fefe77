"""TensorFlow implementations: tf_vtrace, the fused floor, a plain tf.scan, trfl.

Every `build_*` returns a zero-argument callable that runs one call to
completion (TF on CPU executes synchronously, so the returned EagerTensors are
ready) and returns the framework's outputs; `to_numpy` converts them after
timing. trfl is imported lazily: it lives in .venv-bench-tf only.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

import tf_impls  # noqa: E402

IW_KEYS = ("log_rhos", "discounts", "rewards", "values", "bootstrap_value")
LOGITS_KEYS = ("behaviour_logits", "target_logits", "actions", "discounts",
               "rewards", "values", "bootstrap_value")


def _tensors(inputs, keys):
    return [tf.constant(inputs[key]) for key in keys]


def to_numpy(outputs):
    return [tensor.numpy() for tensor in outputs]


# ------------------------------------------------------- vtrace functions
# All share tf_impls' signature: (log_rhos, discounts, rewards, values, bootstrap)
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
    "tf_vtrace in user jit fn": (_tf_vtrace, True),  # inside the caller's XLA function
    "floor": (tf_impls.floor_pass, True),
    "tf.scan (no XLA)": (tf_impls.scan_vtrace, False),
    "trfl": (_trfl_vtrace, False),
}


def build_importance_weights(name, inputs):
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
    from_logits = tf_impls.make_from_logits(vtrace_fn, jit_compile=jit_compile)
    return lambda: from_logits(*args)


def build_learner_step(name, inputs):
    """IMPALA learner step. tf_vtrace and floor run the whole step under XLA,
    the way a user after speed writes it; trfl and tf.scan run it in a plain
    tf.function, as in the scalable_agent lineage they come from."""
    vtrace_fn, jit_compile = VTRACE_FUNCTIONS[name]
    step = tf_impls.make_learner_step(vtrace_fn, jit_compile=jit_compile is not False)
    args = _tensors(inputs, LOGITS_KEYS)
    return lambda: step(*args)


BUILDERS = {
    "importance_weights": build_importance_weights,
    "from_logits": build_from_logits,
    "learner_step": build_learner_step,
}
