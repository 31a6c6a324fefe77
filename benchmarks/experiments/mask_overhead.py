"""Experiment: what a padding `mask` costs the compiled `impala_loss`.

    .venv/bin/python -m benchmarks.experiments.mask_overhead [--quick]

The learner step of `make bench` (impala_loss in a plain tf.function, T=100,
B=256, 18 actions) without a mask, with an all-true mask and with the last
10% of the steps padded, median µs per call. Each runs twice: with the
library's masking of the logits (a bitwise selection, see
`tf_vtrace._masking.bitwise_where_valid`) and with the `tf.where` over a
broadcast predicate that it replaced, patched in for the comparison.
"""

import numpy as np
import tensorflow as tf

from benchmarks import harness
from benchmarks.peers import impl_tf
from tf_vtrace import _fused, _masking


def _where_formulation(valid, tensor):
    return tf.where(_masking.expand_to_rank(valid, tensor), tensor, tf.zeros_like(tensor))


def masked_steps(inputs):
    """name -> zero-argument call, one per mask, with the current masking."""
    T, B = inputs["values"].shape
    masks = {"no mask": None, "all-true mask": np.ones((T, B), bool),
             "10% padded": np.arange(T)[:, None] < int(0.9 * T) + np.zeros((1, B), int)}
    calls = {}
    for name, mask in masks.items():
        extra = None if mask is None else (
            lambda values, mask=mask: {"mask": tf.constant(mask)})
        bind = impl_tf._library_loss_step(False, extra)
        calls[name] = bind(*impl_tf._tensors(inputs, impl_tf.LOGITS_KEYS))
        calls[name]()  # traced and compiled with the masking in force now
    return calls


def main():
    rounds, budget_s = harness.rounds_and_budget(__doc__, 7, 0.25)
    inputs = harness.load_inputs(100, 256)
    calls = {f"{name}, bitwise (library)": call
             for name, call in masked_steps(inputs).items()}
    library = _masking.bitwise_where_valid
    _masking.bitwise_where_valid = _where_formulation  # where `where_valid` looks it up
    _fused._compiled_loss_sums.cache_clear()
    try:
        calls.update({f"{name}, tf.where": call
                      for name, call in masked_steps(inputs).items()})
    finally:
        _masking.bitwise_where_valid = library
        _fused._compiled_loss_sums.cache_clear()
    medians = harness.interleaved_call_medians(calls, rounds, budget_s)
    base = medians["no mask, bitwise (library)"]
    rows = [(name, harness.fmt_us(us), harness.fmt_ratio(us, base))
            for name, us in medians.items()]
    print("impala_loss step in a plain tf.function, T=100, B=256, 18 actions")
    print(harness.format_table(("mask, masking", "us/call", "vs no mask"), rows))


if __name__ == "__main__":
    main()
