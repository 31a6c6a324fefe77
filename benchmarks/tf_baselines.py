"""TensorFlow reference implementations used beside tf_vtrace in the benchmarks.

* `scan_vtrace`: the classic formulation (scalable_agent / trfl lineage): a
  reversed `tf.scan` in a plain `tf.function`, no XLA.
* `floor_pass`: the lower bound. One fused XLA pass that reads the same inputs
  and writes outputs of the same shape with the same element-wise work
  (exp, clips, TD errors, pg terms) but *no* time recursion. No correct V-trace
  can beat it, so "ratio to floor" measures what the recursion costs.
* `log_rhos_from_logits` / `impala_loss`: the shared pieces of the from_logits
  and learner-step workloads, written once so every TF variant does identical work.
"""

import tensorflow as tf

RHO_BAR = 1.0
C_BAR = 1.0
PG_RHO_BAR = 1.0
BASELINE_COST = 0.5
ENTROPY_COST = 0.01


def _shift_in_bootstrap(x, bootstrap_value):
    """x_{t+1} along time, with the bootstrap value as x_T."""
    return tf.concat([x[1:], bootstrap_value[tf.newaxis]], axis=0)


def scan_vtrace(log_rhos, discounts, rewards, values, bootstrap_value):
    """(vs, pg_advantages) via a reversed tf.scan; the trfl/scalable_agent shape."""
    rhos = tf.exp(log_rhos)
    clipped_rhos = tf.minimum(RHO_BAR, rhos)
    cs = tf.minimum(C_BAR, rhos)
    values_tp1 = _shift_in_bootstrap(values, bootstrap_value)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)

    def backward_step(acc, elems):
        delta, discount, c = elems
        return delta + discount * c * acc

    vs_minus_values = tf.scan(
        backward_step, (deltas, discounts, cs),
        initializer=tf.zeros_like(bootstrap_value), reverse=True)
    vs = vs_minus_values + values
    vs_tp1 = _shift_in_bootstrap(vs, bootstrap_value)
    pg_advantages = tf.minimum(PG_RHO_BAR, rhos) * (rewards + discounts * vs_tp1 - values)
    return tf.stop_gradient(vs), tf.stop_gradient(pg_advantages)


def floor_pass(log_rhos, discounts, rewards, values, bootstrap_value):
    """Same inputs, same output shapes, same element-wise work, no recursion."""
    rhos = tf.exp(log_rhos)
    clipped_rhos = tf.minimum(RHO_BAR, rhos)
    cs = tf.minimum(C_BAR, rhos)
    values_tp1 = _shift_in_bootstrap(values, bootstrap_value)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)
    # One step of the recursion's arithmetic, reading a neighbour instead of
    # the accumulated future: the work per element matches, the chain does not.
    vs = (values + deltas
          + discounts * cs * _shift_in_bootstrap(deltas, tf.zeros_like(bootstrap_value)))
    vs_tp1 = _shift_in_bootstrap(vs, bootstrap_value)
    pg_advantages = tf.minimum(PG_RHO_BAR, rhos) * (rewards + discounts * vs_tp1 - values)
    return tf.stop_gradient(vs), tf.stop_gradient(pg_advantages)


def action_log_probs(logits, actions):
    """log pi(a_t) for the taken actions, [T, B]."""
    log_probs = tf.nn.log_softmax(logits)
    return tf.gather(log_probs, actions, axis=-1, batch_dims=2)


def log_rhos_from_logits(behaviour_logits, target_logits, actions):
    return action_log_probs(target_logits, actions) - action_log_probs(behaviour_logits, actions)


def impala_loss(target_logits, actions, values, vs, pg_advantages):
    """IMPALA learner loss: policy gradient + baseline + entropy bonus (summed)."""
    target_log_probs = tf.nn.log_softmax(target_logits)
    taken_log_probs = tf.gather(target_log_probs, actions, axis=-1, batch_dims=2)
    pg_loss = -tf.reduce_sum(taken_log_probs * pg_advantages)
    baseline_loss = 0.5 * tf.reduce_sum(tf.square(vs - values))
    entropy = -tf.reduce_sum(tf.exp(target_log_probs) * target_log_probs)
    return pg_loss + BASELINE_COST * baseline_loss - ENTROPY_COST * entropy


def make_learner_step(vtrace_fn, jit_compile):
    """tf.function: logits -> log-probs -> V-trace -> IMPALA loss -> d loss / d (logits, values).

    `vtrace_fn(log_rhos, discounts, rewards, values, bootstrap_value)` returns
    (vs, pg_advantages) with no gradient, as every implementation does.
    """

    @tf.function(jit_compile=jit_compile)
    def learner_step(behaviour_logits, target_logits, actions, discounts, rewards,
                     values, bootstrap_value):
        with tf.GradientTape() as tape:
            tape.watch([target_logits, values])
            log_rhos = log_rhos_from_logits(behaviour_logits, target_logits, actions)
            vs, pg_advantages = vtrace_fn(
                tf.stop_gradient(log_rhos), discounts, rewards, values, bootstrap_value)
            loss = impala_loss(target_logits, actions, values, vs, pg_advantages)
        grad_logits, grad_values = tape.gradient(loss, [target_logits, values])
        return loss, grad_logits, grad_values

    return learner_step


def make_from_logits(vtrace_fn, jit_compile):
    """tf.function: logits -> log_rhos -> V-trace, the from_logits workload."""

    @tf.function(jit_compile=jit_compile)
    def from_logits(behaviour_logits, target_logits, actions, discounts, rewards,
                    values, bootstrap_value):
        log_rhos = log_rhos_from_logits(behaviour_logits, target_logits, actions)
        return vtrace_fn(log_rhos, discounts, rewards, values, bootstrap_value)

    return from_logits
