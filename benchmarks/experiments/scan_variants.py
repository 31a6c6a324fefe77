"""Experiment: ways to run the V-trace time recursion inside one XLA cluster.

Not part of `make bench`; run it to see which formulation of the backward
recursion  x_t = delta_t + gamma_t * c_t * x_{t+1}  is cheapest on this machine:

    .venv/bin/python -m benchmarks.experiments.scan_variants [--quick]

Every variant is wrapped in the same `tf.function(jit_compile=True)` and
compared with the fused no-recursion floor from tf_baselines.
"""

import argparse
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

from benchmarks import (
    harness,
    tf_baselines,
)


def _recursion_inputs(log_rhos, discounts, rewards, values, bootstrap_value):
    rhos = tf.exp(log_rhos)
    values_tp1 = tf_baselines._shift_in_bootstrap(values, bootstrap_value)
    deltas = tf.minimum(tf_baselines.RHO_BAR, rhos) * (rewards + discounts * values_tp1 - values)
    decays = discounts * tf.minimum(tf_baselines.C_BAR, rhos)  # gamma_t * c_t
    return rhos, deltas, decays


def _finish(rhos, vs_minus_values, discounts, rewards, values, bootstrap_value):
    vs = vs_minus_values + values
    vs_tp1 = tf_baselines._shift_in_bootstrap(vs, bootstrap_value)
    pg_advantages = (tf.minimum(tf_baselines.PG_RHO_BAR, rhos)
                     * (rewards + discounts * vs_tp1 - values))
    return vs, pg_advantages


def _with_recursion(recursion):
    """Turn recursion(deltas, decays) -> vs - V into a full V-trace function."""

    def vtrace(log_rhos, discounts, rewards, values, bootstrap_value):
        rhos, deltas, decays = _recursion_inputs(
            log_rhos, discounts, rewards, values, bootstrap_value)
        return _finish(rhos, recursion(deltas, decays), discounts, rewards, values,
                       bootstrap_value)

    return vtrace


def scan_recursion(deltas, decays):
    return tf.scan(lambda acc, x: x[0] + x[1] * acc, (deltas, decays),
                   initializer=tf.zeros_like(deltas[0]), reverse=True)


def unrolled_recursion(deltas, decays):
    """Python loop over a static T: XLA sees T small fusions, no while loop."""
    acc = tf.zeros_like(deltas[0])
    outputs = []
    for delta, decay in zip(reversed(tf.unstack(deltas)), reversed(tf.unstack(decays))):
        acc = delta + decay * acc
        outputs.append(acc)
    return tf.stack(outputs[::-1])


def associative_recursion(deltas, decays):
    """Parallel prefix over affine maps x -> b + a*x (log T depth, ~2x the flops)."""
    import tensorflow_probability as tfp

    def compose(later, earlier):  # apply `later` (closer to T) first, then `earlier`
        a_late, b_late = later
        a_early, b_early = earlier
        return a_early * a_late, b_early + a_early * b_late

    _, vs_minus_values = tfp.math.scan_associative(
        compose, (decays[::-1], deltas[::-1]))
    return vs_minus_values[::-1]


def blocked_recursion(deltas, decays, block=10):
    """Unrolled inside blocks of `block` steps, tf.scan across blocks.

    Inside a block, each step's value is an affine function of the carry coming
    from the next block: x_t = local_t + gain_t * carry. The block-local parts
    are computed for all blocks at once (vectorised over blocks), then a short
    scan over T/block carries stitches them together.
    """
    T = deltas.shape[0]
    if T % block:
        return scan_recursion(deltas, decays)
    shape = [T // block, block] + deltas.shape[1:].as_list()
    d_blocks = tf.reshape(deltas, shape)
    a_blocks = tf.reshape(decays, shape)
    local = tf.zeros_like(d_blocks[:, 0])
    gain = tf.ones_like(a_blocks[:, 0])
    locals_, gains = [], []
    for k in reversed(range(block)):
        local = d_blocks[:, k] + a_blocks[:, k] * local
        gain = a_blocks[:, k] * gain
        locals_.append(local)
        gains.append(gain)
    local_all = tf.stack(locals_[::-1], axis=1)  # [T/block, block, B]
    gain_all = tf.stack(gains[::-1], axis=1)
    # carry_j = value at the first step of block j+1 (x_{start of next block}).
    block_heads = scan_recursion(local_all[:, 0], gain_all[:, 0])
    carries = tf.concat([block_heads[1:], tf.zeros_like(block_heads[:1])], axis=0)
    result = local_all + gain_all * carries[:, tf.newaxis]
    return tf.reshape(result, tf.shape(deltas))


def chunked_recursion(deltas, decays, chunk=8):
    """tf.scan over chunks of `chunk` steps, each unrolled in the scan body
    (the formulation tf_vtrace adopted in commit 9674ff7), T padded to a multiple."""
    T = deltas.shape[0]
    padding = tf.zeros([(-T) % chunk] + deltas.shape[1:].as_list(), deltas.dtype)
    shape = [-1, chunk] + deltas.shape[1:].as_list()
    d_chunks, a_chunks = (tf.reshape(tf.concat([x, padding], 0), shape) for x in (deltas, decays))

    def body(next_chunk, elems):
        delta, decay = elems
        acc, accs = next_chunk[0], [None] * chunk
        for i in reversed(range(chunk)):
            acc = delta[i] + decay[i] * acc
            accs[i] = acc
        return tf.stack(accs)

    out = tf.scan(body, (d_chunks, a_chunks), initializer=tf.zeros_like(d_chunks[0]),
                  reverse=True)
    return tf.reshape(out, [-1] + deltas.shape[1:].as_list())[:T]


def library_vtrace(*args):
    import tf_vtrace

    return tuple(tf_vtrace.from_importance_weights(*args))


VARIANTS = {
    "tf_vtrace (library)": library_vtrace,
    "xla tf.scan": _with_recursion(scan_recursion),
    "xla unrolled (static T)": _with_recursion(unrolled_recursion),
    "xla chunked(8) scan": _with_recursion(chunked_recursion),
    "xla scan_associative": _with_recursion(associative_recursion),
    "xla blocked(10)+scan": _with_recursion(blocked_recursion),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", default="100x256,20x32")
    args = parser.parse_args()
    rounds, budget = (2, 0.02) if args.quick else (7, 0.15)
    for shape in args.shapes.split(","):
        T, B = map(int, shape.split("x"))
        inputs = harness.load_inputs(T, B)
        tensors = [tf.constant(inputs[k]) for k in harness.INPUT_KEYS[:5]]
        functions = {"floor (fused, no recursion)": tf_baselines.floor_pass, **VARIANTS}
        if T > 200:  # unrolling compiles T fusions: ~20 s at T=100, GBs of RAM at T=1000
            functions.pop("xla unrolled (static T)")
        compiled = {name: tf.function(fn, jit_compile=True) for name, fn in functions.items()}
        reference = compiled["xla tf.scan"](*tensors)[0].numpy()
        runners = {}
        for name, fn in compiled.items():
            if name != "floor (fused, no recursion)":
                diff = np.max(np.abs(fn(*tensors)[0].numpy() - reference))
                assert diff < 1e-3, (name, diff)
            runners[name] = functools.partial(
                harness.time_calls, functools.partial(fn, *tensors))
        medians = harness.interleaved_medians(runners, rounds, budget)
        floor = medians["floor (fused, no recursion)"]
        rows = [(name, harness.fmt_us(us), harness.fmt_ratio(us, floor))
                for name, us in medians.items()]
        print(f"\nT={T}, B={B}: median us per call")
        print(harness.format_table(("variant", "us", "vs floor"), rows), flush=True)


if __name__ == "__main__":
    main()
