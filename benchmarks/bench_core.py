"""Core V-trace timings in one process: tf_vtrace vs a plain tf.scan vs the floor.

    .venv/bin/python -m benchmarks.bench_core [--quick]

For `from_importance_weights` and `from_logits` at T=100, B=256 (18 actions)
and T=20, B=32 it prints the median µs per call of

* tf_vtrace, called eagerly as a user calls it (it compiles its own XLA kernel),
* tf_vtrace called inside the user's own plain tf.function (no jit_compile),
* tf_vtrace called inside the user's own tf.function(jit_compile=True),
* a reversed tf.scan in a plain tf.function (no XLA): the scalable_agent shape,
* the floor: one fused XLA pass with the same element-wise work and no time
  recursion, the lower bound for any V-trace,

and each one's ratio to the floor. Implementations alternate in rounds after a
warm-up (trace + compile) so machine noise is shared.
"""

import argparse
import functools
import sys

import numpy as np

from benchmarks import harness
from benchmarks.peers import impl_tf

SHAPES = ((100, 256), (20, 32))
WORKLOADS = ("importance_weights", "from_logits")
IMPLEMENTATIONS = ("tf_vtrace", "tf_vtrace in user plain fn", "tf_vtrace in user jit fn",
                   "tf.scan (no XLA)", "floor")
# At T=100, B=256, from_importance_weights should be within this of the floor:
TARGET_RATIOS = {"tf_vtrace": 1.3, "tf_vtrace in user plain fn": 1.2}


def build_runners(workload, inputs):
    """Warm (compiled) callables per implementation, plus tf_vtrace's vs error."""
    build = impl_tf.BUILDERS[workload]
    calls = {name: build(name, inputs) for name in IMPLEMENTATIONS}
    outputs = {name: impl_tf.to_numpy(call()) for name, call in calls.items()}
    reference_vs = outputs["tf.scan (no XLA)"][0]
    vs_diffs = {name: float(np.max(np.abs(out[0] - reference_vs))) for name, out in outputs.items()}
    runners = {name: functools.partial(harness.time_calls, call) for name, call in calls.items()}
    return runners, vs_diffs


def bench_case(workload, T, B, rounds, budget_s):
    inputs = harness.load_inputs(T, B)
    runners, vs_diffs = build_runners(workload, inputs)
    medians = harness.interleaved_medians(runners, rounds, budget_s)
    return medians, vs_diffs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny iteration counts (smoke test), numbers not meaningful")
    args = parser.parse_args(argv)
    rounds, budget_s = (2, 0.01) if args.quick else (9, 0.25)

    rows, target_ratios = [], {}
    for T, B in SHAPES:
        for workload in WORKLOADS:
            medians, vs_diffs = bench_case(workload, T, B, rounds, budget_s)
            floor = medians["floor"]
            for name in IMPLEMENTATIONS:
                rows.append((workload, f"{T}x{B}", name, harness.fmt_us(medians[name]),
                             harness.fmt_ratio(medians[name], floor),
                             "(not V-trace)" if name == "floor" else f"{vs_diffs[name]:.1e}"))
            if (T, B, workload) == (100, 256, "importance_weights"):
                target_ratios = {name: medians[name] / floor for name in TARGET_RATIOS}
            print(f"done {workload} T={T} B={B}", file=sys.stderr, flush=True)

    print("median us per call (T x B; 18 actions for from_logits);"
          " max|dvs| = max |vs - vs of tf.scan|")
    print(harness.format_table(
        ("workload", "TxB", "implementation", "us/call", "vs floor", "max|dvs|"), rows))
    print()
    for name, ratio in target_ratios.items():
        goal = TARGET_RATIOS[name]
        where = "" if name == "tf_vtrace" else f" ({name[len('tf_vtrace '):]})"
        print(f"target: tf_vtrace from_importance_weights{where} at T=100,B=256 <= "
              f"{goal}x floor: {ratio:.2f}x ({'met' if ratio <= goal else 'MISSED'})")


if __name__ == "__main__":
    main()
