"""The records the IMPALA loss's options and inputs travel in.

Private to tf_vtrace (not exported): `impala.py` builds them from its public
arguments, the private loss functions take them instead of long keyword
lists, and the faces (Keras, TF-Agents, SavedModel) build them from their
own constructor arguments. Defaults are those of the public functions.
"""

import collections

__all__ = ["VTRACE_HYPERPARAMETERS", "VTraceOptions", "LossCosts", "LossInputs",
           "hyperparameters"]

# What the math of the targets depends on: the faces store and serialize
# these (the rest of `VTraceOptions` says how the targets are computed).
VTRACE_HYPERPARAMETERS = ("pg_target", "clip_rho_threshold",
                          "clip_pg_rho_threshold", "clip_c_threshold",
                          "lambda_", "alpha_")

# The options of `impala.vtrace_targets` (its keyword arguments after the
# inputs, but `name`).
VTraceOptions = collections.namedtuple(
    "VTraceOptions",
    VTRACE_HYPERPARAMETERS + ("dist_class", "model", "time_major",
                              "jit_compile", "scan", "validate_args"),
    defaults=("vs", 1.0, 1.0, 1.0, 1.0, 1.0, None, None, True, True, "auto",
              False))

# How `impala.impala_loss` weighs and reduces the per-step terms.
LossCosts = collections.namedtuple(
    "LossCosts",
    ("baseline_cost", "entropy_cost", "kl_cost", "reduction", "cross_replica"),
    defaults=(0.5, 0.00025, 0.0, "sum", True))

# The data of one batch of unrolls: the seven inputs of the scalable_agent
# API, then the optional padding, truncation and behaviour log-probs.
LossInputs = collections.namedtuple(
    "LossInputs",
    ("behaviour_policy_logits", "target_policy_logits", "actions", "discounts",
     "rewards", "values", "bootstrap_value", "mask", "truncated",
     "truncation_values", "behaviour_action_log_probs"),
    defaults=(None, None, None, None))


def hyperparameters(options):
    """The `VTRACE_HYPERPARAMETERS` of a `VTraceOptions`, as a dict."""
    return {name: getattr(options, name) for name in VTRACE_HYPERPARAMETERS}
