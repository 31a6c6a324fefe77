"""The sequential scan against the associative (log-depth) scan, by length T.

    .venv/bin/python -m benchmarks.scan_crossover [--quick] [--batch 256]
                                                  [--lengths 20,100,1000,10000]

For each T it times `tf_vtrace.from_importance_weights` called eagerly with
`scan="sequential"` and with `scan="associative"`, and the fused floor (one
XLA pass with the same element-wise work and no recursion), alternating the
three in rounds (benchmarks/harness.py). It prints the median µs per call,
the ratio associative / sequential and the max |vs difference| between them,
so the crossover that `scan="auto"` relies on can be re-measured on any
machine.
"""

import argparse
import sys

import numpy as np
import tensorflow as tf

from benchmarks import harness, tf_baselines
from benchmarks.peers import impl_tf

SCANS = ("sequential", "associative")


def build_calls(T, B):
    """Warm zero-argument calls per implementation, and their vs outputs."""
    import tf_vtrace

    inputs = harness.load_inputs(T, B)
    tensors = [tf.constant(inputs[key]) for key in impl_tf.IW_KEYS]
    calls = {f"tf_vtrace scan={scan}": (lambda s: lambda: tf_vtrace.from_importance_weights(
        *tensors, scan=s))(scan) for scan in SCANS}
    floor = tf.function(tf_baselines.floor_pass, jit_compile=True)
    calls["floor"] = lambda: floor(*tensors)
    outputs = {name: call()[0].numpy() for name, call in calls.items()}
    return calls, outputs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--lengths", default="20,100,1000,10000")
    args = parser.parse_args(argv)
    rounds, budget_s = (2, 0.01) if args.quick else (7, 0.2)
    rows = []
    for T in map(int, args.lengths.split(",")):
        calls, outputs = build_calls(T, args.batch)
        runners = {name: (lambda c: lambda n: harness.time_calls(c, n))(call)
                   for name, call in calls.items()}
        medians = harness.interleaved_medians(runners, rounds, budget_s)
        sequential = medians["tf_vtrace scan=sequential"]
        associative = medians["tf_vtrace scan=associative"]
        diff = float(np.max(np.abs(outputs["tf_vtrace scan=sequential"]
                                   - outputs["tf_vtrace scan=associative"])))
        rows.append((f"{T}x{args.batch}", harness.fmt_us(sequential),
                     harness.fmt_us(associative), harness.fmt_us(medians["floor"]),
                     f"{associative / sequential:.2f}x", f"{diff:.1e}"))
        print(f"done T={T}", file=sys.stderr, flush=True)
    print("median us per call, from_importance_weights called eagerly (T x B)")
    print(harness.format_table(
        ("TxB", "sequential", "associative", "floor", "assoc / seq", "max|dvs|"), rows))


if __name__ == "__main__":
    main()
