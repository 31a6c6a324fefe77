"""NumPy reference: the V-trace recursion as a Python loop over time.

No autodiff, so only the importance-weights workload exists here.
"""

import numpy as np

RHO_BAR = C_BAR = PG_RHO_BAR = 1.0


def vtrace(log_rhos, discounts, rewards, values, bootstrap_value):
    rhos = np.exp(log_rhos)
    clipped_rhos = np.minimum(RHO_BAR, rhos)
    decays = discounts * np.minimum(C_BAR, rhos)
    values_tp1 = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)
    vs_minus_values = np.empty_like(deltas)
    acc = np.zeros_like(bootstrap_value)
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + decays[t] * acc
        vs_minus_values[t] = acc
    vs = vs_minus_values + values
    vs_tp1 = np.concatenate([vs[1:], bootstrap_value[None]], axis=0)
    pg_advantages = np.minimum(PG_RHO_BAR, rhos) * (rewards + discounts * vs_tp1 - values)
    return vs, pg_advantages


def build_importance_weights(name, inputs):
    args = [inputs[k] for k in ("log_rhos", "discounts", "rewards", "values", "bootstrap_value")]
    return lambda: vtrace(*args)


def preload(name):
    """Nothing to import lazily here."""


def to_numpy(outputs):
    return list(outputs)


BUILDERS = {"importance_weights": build_importance_weights}
