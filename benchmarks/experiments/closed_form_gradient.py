"""Experiment: a closed-form gradient of the categorical terms against autodiff.

    .venv/bin/python -m benchmarks.experiments.closed_form_gradient [--rounds N]

The learner step of `make bench` (T=100, B=256, 18 actions, XLA), written
three ways around the same V-trace (the floor's pass, then
`tf_vtrace.from_importance_weights`): the benchmark's own step (log-probs by
a gather, gradients by autodiff), log-probs by a one-hot contraction (as the
library computes them) with autodiff, and the one-hot step with its gradient
written out:

    d loss / d logits = A · (π − onehot(a)) + c_H · π · (log π + H),

A the policy-gradient advantage, c_H the entropy cost and H the entropy per
step. Median µs per call over alternating rounds of 20 calls, and the ratio
to the benchmark's step on the floor's pass. The closed form's outputs are
checked against autodiff's first.
"""

import argparse
import time

import numpy as np
import tensorflow as tf

from benchmarks import tf_baselines as tb
from tf_vtrace import vtrace as core

T, B, A = 100, 256, 18
KEYS = ("behaviour_logits", "target_logits", "actions", "discounts", "rewards",
        "values", "bootstrap_value")


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "behaviour_logits": rng.normal(size=(T, B, A)), "target_logits": rng.normal(size=(T, B, A)),
        "actions": rng.integers(0, A, size=(T, B)).astype(np.int32),
        "discounts": np.full((T, B), 0.99), "rewards": rng.normal(size=(T, B)),
        "values": rng.normal(size=(T, B)), "bootstrap_value": rng.normal(size=(B,))}
    return [tf.constant(arrays[k] if k == "actions" else arrays[k].astype(np.float32))
            for k in KEYS]


def _library_vtrace(log_rhos, discounts, rewards, values, bootstrap_value):
    returns = core.from_importance_weights(log_rhos, discounts, rewards, values,
                                           bootstrap_value)
    return tf.stop_gradient(returns.vs), tf.stop_gradient(returns.pg_advantages)


def _one_hot_terms(behaviour_logits, target_logits, actions):
    one_hot = tf.one_hot(actions, A, dtype=target_logits.dtype)
    log_pi = tf.nn.log_softmax(target_logits)
    log_pi_a = tf.reduce_sum(log_pi * one_hot, -1)
    log_mu_a = tf.reduce_sum(tf.nn.log_softmax(behaviour_logits) * one_hot, -1)
    return one_hot, log_pi, log_pi_a, log_pi_a - log_mu_a


def _loss(log_pi, log_pi_a, values, vs, advantages):
    entropy = -tf.reduce_sum(tf.exp(log_pi) * log_pi, -1)
    return (-tf.reduce_sum(log_pi_a * advantages)
            + tb.BASELINE_COST * 0.5 * tf.reduce_sum(tf.square(vs - values))
            - tb.ENTROPY_COST * tf.reduce_sum(entropy)), entropy


def one_hot_autodiff(vtrace_fn):
    @tf.function(jit_compile=True)
    def step(behaviour_logits, target_logits, actions, discounts, rewards, values,
             bootstrap_value):
        with tf.GradientTape() as tape:
            tape.watch([target_logits, values])
            _, log_pi, log_pi_a, log_rhos = _one_hot_terms(
                behaviour_logits, target_logits, actions)
            vs, advantages = vtrace_fn(tf.stop_gradient(log_rhos), discounts, rewards,
                                       values, bootstrap_value)
            loss, _ = _loss(log_pi, log_pi_a, values, vs, advantages)
        return (loss, *tape.gradient(loss, [target_logits, values]))
    return step


def closed_form(vtrace_fn):
    @tf.function(jit_compile=True)
    def step(behaviour_logits, target_logits, actions, discounts, rewards, values,
             bootstrap_value):
        one_hot, log_pi, log_pi_a, log_rhos = _one_hot_terms(
            behaviour_logits, target_logits, actions)
        vs, advantages = vtrace_fn(log_rhos, discounts, rewards, values, bootstrap_value)
        loss, entropy = _loss(log_pi, log_pi_a, values, vs, advantages)
        pi = tf.exp(log_pi)
        grad_logits = (advantages[..., None] * (pi - one_hot)
                       + tb.ENTROPY_COST * pi * (log_pi + entropy[..., None]))
        return loss, grad_logits, tb.BASELINE_COST * (values - vs)
    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    inputs = _inputs()
    steps = {}
    for label, vtrace_fn in (("floor pass", tb.floor_pass), ("V-trace", _library_vtrace)):
        steps[f"{label}: gather, autodiff (make bench)"] = tb.make_learner_step(vtrace_fn, True)
        steps[f"{label}: one-hot, autodiff"] = one_hot_autodiff(vtrace_fn)
        steps[f"{label}: one-hot, closed form"] = closed_form(vtrace_fn)
    reference = [t.numpy() for t in steps["V-trace: one-hot, autodiff"](*inputs)]
    for got, want in zip(steps["V-trace: one-hot, closed form"](*inputs), reference):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(20):
                outputs = step(*inputs)
            outputs[0].numpy()
            times[name].append((time.perf_counter() - start) / 20 * 1e6)
    base = np.median(times["floor pass: gather, autodiff (make bench)"])
    for name, values in times.items():
        print(f"{name:48s} {np.median(values):8.0f} µs  {np.median(values) / base:.2f}x")


if __name__ == "__main__":
    main()
