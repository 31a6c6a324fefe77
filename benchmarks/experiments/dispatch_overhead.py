"""Experiment: where an eager tf_vtrace.from_importance_weights call spends its time.

    .venv/bin/python -m benchmarks.experiments.dispatch_overhead [--quick]

Peels the call layer by layer at T=100, B=256 (median µs per call): the
public eager call; the same inside a user's tf.function(jit_compile=True) and
that function's concrete function (which skips tf.function's argument
canonicalisation and cache lookup); the same inside a user's plain
tf.function, beside the two costs that bound it there (a plain tf.function
that returns its first input, and one that calls an XLA function that does);
the floor both ways; an XLA function that returns its first input (the pure
cost of dispatching to XLA); one eager op.
Uses only public APIs, so it keeps working while tf_vtrace's internals change.
"""

import tensorflow as tf

from benchmarks import harness, tf_baselines
from benchmarks.peers import impl_tf


def _jit_and_concrete(fn, tensors):
    function = tf.function(fn, jit_compile=True)
    return function, function.get_concrete_function(*tensors)


def layered_calls(tensors):
    """Zero-argument calls, from the public API down to a bare XLA dispatch."""
    import tf_vtrace

    def vtrace_in_user_fn(*args):
        return tuple(tf_vtrace.from_importance_weights(*args))

    user_fn, user_concrete = _jit_and_concrete(vtrace_in_user_fn, tensors)
    floor_fn, floor_concrete = _jit_and_concrete(tf_baselines.floor_pass, tensors)
    empty_fn, empty_concrete = _jit_and_concrete(lambda *args: args[0], tensors)
    plain_user_fn = tf.function(vtrace_in_user_fn)
    plain_empty_fn = tf.function(lambda *args: args[0])
    nested_empty_fn = tf.function(lambda *args: empty_fn(*args))
    one = tf.constant(1.0)
    return {
        "tf_vtrace public eager call": lambda: tf_vtrace.from_importance_weights(*tensors),
        "tf_vtrace in user jit tf.function": lambda: user_fn(*tensors),
        "tf_vtrace in user jit, concrete fn": lambda: user_concrete(*tensors),
        "tf_vtrace in user plain tf.function": lambda: plain_user_fn(*tensors),
        "empty plain tf.function": lambda: plain_empty_fn(*tensors),
        "empty XLA call in plain tf.function": lambda: nested_empty_fn(*tensors),
        "floor tf.function": lambda: floor_fn(*tensors),
        "floor concrete fn": lambda: floor_concrete(*tensors),
        "empty XLA tf.function": lambda: empty_fn(*tensors),
        "empty XLA concrete fn": lambda: empty_concrete(*tensors),
        "one eager tf.add": lambda: tf.add(one, one),
    }


def main():
    rounds, budget_s = harness.rounds_and_budget(__doc__, 9, 0.25)
    inputs = harness.load_inputs(100, 256)
    tensors = [tf.constant(inputs[key]) for key in impl_tf.IW_KEYS]
    calls = layered_calls(tensors)
    for call in calls.values():
        call()
    medians = harness.interleaved_call_medians(calls, rounds, budget_s)
    floor = medians["floor tf.function"]
    rows = [(name, harness.fmt_us(us), harness.fmt_ratio(us, floor))
            for name, us in medians.items()]
    print("T=100, B=256, median us per call")
    print(harness.format_table(("layer", "us/call", "vs floor"), rows))


if __name__ == "__main__":
    main()
