"""Median µs of the learner-step rows for the tf_vtrace on PYTHONPATH.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.experiments.learner_rows [ROUNDS]

Prints one JSON line. Run it alternately from two checkouts (before / after a
change) to compare them in one sitting, as docs/records/performance.md ("Checks that
are always on") did for issue 24: the rows are `make bench`'s learner rows
(`benchmarks.peers.impl_tf.build_learner_step`) plus an eager `from_logits`,
interleaved in rounds.
"""
import json
import sys

import tensorflow as tf

import tf_vtrace
from benchmarks import harness
from benchmarks.peers import impl_tf

ROWS = ("tf_vtrace", "tf_vtrace impala_loss in jit fn", "tf_vtrace in user plain fn",
        "tf_vtrace ImpalaLoss in fit")


def _blocking(call):
    def run():
        return tf.nest.map_structure(
            lambda t: t.numpy() if hasattr(t, "numpy") else t, call())
    return run


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    rounds = int(argv[0]) if argv else 4
    inputs = harness.load_inputs(100, 256)
    calls = {row: _blocking(impl_tf.build_learner_step(row, inputs)) for row in ROWS}
    args = [tf.constant(inputs[k]) for k in impl_tf.LOGITS_KEYS]
    calls["from_logits, eager"] = _blocking(lambda: tf_vtrace.from_logits(*args).vs)
    for call in calls.values():  # Trace and compile before timing.
        call()
        call()
    runners = {name: (lambda c: lambda n: harness.time_calls(c, n))(call)
               for name, call in calls.items()}
    medians = harness.interleaved_medians(runners, rounds, 0.5)
    print(json.dumps({"tf_vtrace": tf_vtrace.__file__, "medians": medians}))


if __name__ == "__main__":
    main()
