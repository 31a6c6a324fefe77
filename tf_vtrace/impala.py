r"""The IMPALA actor-critic loss, as a plain function for custom training loops.

Espeholt et al. (2018), section 4.2. With V-trace targets vs_t and
policy-gradient advantages A_t (no gradient through either), the loss per step
is

    ℓ_t = − log π(a_t | x_t) · A_t                          policy gradient
          + baseline_cost · ½ (vs_t − V(x_t))²               baseline
          − entropy_cost · H(π(· | x_t))                     entropy bonus
          + kl_cost · KL(μ(· | x_t) ‖ π(· | x_t))            optional

and the loss is a reduction of ℓ_t over the valid steps of the batch:

* ``"sum"``: Σ_t,b ℓ — scalable_agent, torchbeast and RLlib (the default);
* ``"mean"``: Σ_t,b ℓ / (T·B) — SEED RL and Acme (`tf.reduce_mean`);
* ``"masked_mean"``: Σ_t,b ℓ / (number of valid steps).

The reductions differ by a factor of T·B, which the learning rate and costs
absorb: switching one for the other without retuning changes the step size.

This module extends the core (`tf_vtrace.vtrace`) with what a learner needs
beyond the recursion: a padding mask, episode truncation, the choice of the
policy-gradient target for λ < 1, and the loss terms. It calls the core for the
recursion itself and never duplicates it.

Its private helpers have homes of their own: the records the options and
inputs travel in (`_options`), the padding and truncation rewrite
(`_masking`) and the loss as one compiled XLA call (`_fused`).
"""

import collections
import functools

import tensorflow as tf
import tensorflow_probability as tfp

from tf_vtrace import _checks, _fused, _masking, _options, _tensors, vtrace

tfd = tfp.distributions

__all__ = [
    "REDUCTIONS",
    "PG_TARGETS",
    "DIAGNOSTICS",
    "VTraceTargets",
    "vtrace_targets",
    "impala_loss",
]

REDUCTIONS = ("sum", "mean", "masked_mean")
PG_TARGETS = ("vs", "lambda_returns")
DIAGNOSTICS = (
    "policy_loss", "baseline_loss", "entropy_loss", "kl_loss",
    "mean_rho", "rho_clipped_fraction", "c_clipped_fraction", "ess_fraction",
    "entropy", "kl")

# A ratio counts as clipped when log ρ exceeds log ρ̄ by more than this, i.e.
# ρ > e^0.001 ρ̄ ≈ 1.001 ρ̄. On-policy, π and μ are the same network evaluated twice (by the
# actor and the learner, possibly with and without XLA), so ρ = 1 ± 1e-5 of
# float noise; with ρ̄ = 1 a strict ρ > ρ̄ would count half of those as clipped.
CLIPPED_LOG_RATIO_MARGIN = 1e-3


# --- The policy-gradient target ----------------------------------------------


def _lambda_return_advantages(vs, log_rhos, discounts, rewards, values,
                              bootstrap_value, lambda_, clip_pg_rho_threshold,
                              alpha_):
    """rlax's policy-gradient advantage for λ < 1, from the core's vs:

        A_t = min(ρ̄_pg, ρ_t) (r_t + γ_t (λ_t vs_{t+1} + (1 − λ_t) V(x_{t+1}))
                               − V(x_t))

    with vs_T = V(x_T) = bootstrap (leaky V-trace: the core's mixed ratio for
    min(ρ̄_pg, ρ_t)). With λ = 1 it equals SEED RL's (the core's)
    r_t + γ_t vs_{t+1}.
    """
    next_vs = _tensors.shift_in_bootstrap(vs, bootstrap_value)
    next_values = _tensors.shift_in_bootstrap(values, bootstrap_value)
    next_target = lambda_ * next_vs + (1. - lambda_) * next_values
    clipped_pg_rhos = _tensors.clipped_ratio(log_rhos, clip_pg_rho_threshold,
                                             alpha_)
    return tf.stop_gradient(
        clipped_pg_rhos * (rewards + discounts * next_target - values))


# --- Targets -----------------------------------------------------------------


class VTraceTargets(collections.namedtuple(
        "VTraceTargets",
        ["vs", "pg_advantages", "log_rhos", "target_action_log_probs",
         "behaviour_action_log_probs", "valid"])):
    """V-trace targets with the log-probs and the mask they came from.

    Attributes:
      vs: The value targets vs_t (no gradient); at padded steps, 0 or V(x_t).
      pg_advantages: The policy-gradient advantages (no gradient); per
        `pg_target`.
      log_rhos: log ρ_t summed over heads, differentiable; 0 at padded steps.
      target_action_log_probs: log π(a_t | x_t) per head (a list),
        differentiable; finite at padded steps whatever the padding held.
      behaviour_action_log_probs: log μ(a_t | x_t) per head (a list).
      valid: The bool mask of valid (not padded) steps.
    """


def _prepare_heads(heads, name, valid):
    return [_masking.where_valid(valid, head)
            for head in _checks.to_head_tensors(heads, name)]


def _upcast(value, name):
    """float16/bfloat16 → float32 (mixed-precision model outputs); else as is.

    A mixed-precision model outputs half-precision logits and values while the
    data (rewards, discounts) stay float32: the loss runs in float32.
    """
    if value is None:
        return None
    tensor = _checks.to_tensor(value, name)
    return tf.cast(tensor, tf.float32) if tensor.dtype in _checks.HALF_DTYPES else value


def _upcast_inputs(inputs):
    """`inputs` with half-precision values and data in float32 (`_upcast`)."""
    return inputs._replace(**{
        name: _upcast(getattr(inputs, name), name) for name in (
            "values", "discounts", "rewards", "bootstrap_value",
            "truncation_values")})


def _checked_inputs(inputs, options):
    """`inputs` held to the shape contract of every entry point (docs/api.md,
    "Shapes") and `options` to the hyperparameters' ranges, before anything
    is masked or compiled: `values` waits on the run-time asserts of dims
    unknown when traced, outside any compiled call (XLA drops asserts).

    The heads come back as lists of tensors, `values` and the data upcast.
    """
    _checks.check_choice(options.pg_target, "pg_target", PG_TARGETS)
    _checks.check_hyperparameters(options)
    _checks.refuse_unraisable(options.validate_args)
    inputs = _upcast_inputs(inputs)
    values = _checks.to_float_tensor(inputs.values, "values")
    _, _, _, asserts = _checks.check_sequences(
        values, inputs.discounts, inputs.rewards, values, inputs.bootstrap_value,
        options.lambda_, options.time_major)
    heads = {name: _checks.to_head_tensors(getattr(inputs, name), name)
             for name in ("target_policy_logits", "actions")}
    heads["behaviour_action_log_probs"] = (
        None if inputs.behaviour_action_log_probs is None
        else _checks.to_head_tensors(inputs.behaviour_action_log_probs,
                                     "behaviour_action_log_probs"))
    heads["behaviour_policy_logits"] = None if heads[
        "behaviour_action_log_probs"] is not None else _checks.to_head_tensors(
            inputs.behaviour_policy_logits, "behaviour_policy_logits")
    asserts += _checks.check_heads(
        heads["target_policy_logits"], heads["behaviour_policy_logits"],
        heads["actions"], values, options.dist_class is None)
    if heads["behaviour_action_log_probs"] is not None:
        asserts += _checks.check_head_log_probs(
            heads["behaviour_action_log_probs"], "behaviour_action_log_probs", values)
    for name in ("mask", "truncated", "truncation_values"):
        if getattr(inputs, name) is not None:
            asserts += _checks.check_same_shape(
                _checks.to_tensor(getattr(inputs, name), name), name,
                values, "values", options.time_major)
    (values,) = _checks.with_dependencies(asserts, [values])
    return inputs._replace(values=values, **heads)


def _to_compute(tensors, dtype):
    return [tf.cast(t, dtype) if t.dtype.is_floating and t.dtype != dtype else t
            for t in tensors]


def _step_flags(inputs, values, options):
    """The checked, time-major `valid` and `truncated` masks and final values."""
    time_major = options.time_major
    asserts = []
    if inputs.mask is None:
        valid = tf.ones_like(values, tf.bool)
    else:
        valid, mask_asserts = _masking.as_bool(inputs.mask, "mask", values,
                                               time_major)
        asserts += mask_asserts
    if inputs.truncated is None:
        truncated = tf.zeros_like(values, tf.bool)
        truncation_values = tf.zeros_like(values)
    else:
        truncated, trunc_asserts = _masking.as_bool(
            inputs.truncated, "truncated", values, time_major)
        asserts += trunc_asserts
        if inputs.truncation_values is None:
            raise ValueError(
                "`truncation_values` is required with `truncated`: V(x_{t+1}) "
                "of each truncated episode's final observation, [T, B, ...].")
        truncation_values = _checks.to_float_tensor(
            inputs.truncation_values, "truncation_values", values.dtype)
        asserts += _checks.check_same_shape(
            truncation_values, "truncation_values", values, "values",
            time_major)
    flags = [_tensors.to_time_major(t, time_major)
             for t in (valid, truncated, truncation_values)]
    return _checks.with_dependencies(asserts, flags)


# The masked policy parameters per head, in the caller's layout and the
# compute dtype: what the log-probs were computed from, and what the loss
# builds its distributions (entropy, KL) from. `behaviour` is None when the
# caller passed `behaviour_action_log_probs`; it carries no gradient.
_Heads = collections.namedtuple("_Heads", ["target", "behaviour"])


def _check_distributions(policy_heads, action_heads, values, options):
    """With a `dist_class`, static shapes that would otherwise fail deep in
    a `log_prob` (or broadcast silently): each head's distribution must have
    `values`' shape as its batch shape (one log-prob per step) and its
    actions that shape plus the distribution's event shape."""
    count = len(policy_heads)
    for k, (params, actions) in enumerate(zip(policy_heads, action_heads)):
        label = "" if count == 1 else f"[{k}]"
        dist = _tensors.make_distribution(params, options.dist_class, options.model)
        batch, event = dist.batch_shape, dist.event_shape
        if not batch.is_compatible_with(values.shape):
            raise ValueError(
                f"`dist_class` built from `target_policy_logits{label}` "
                f"{params.shape} a distribution of batch shape {batch}, but "
                f"`values` is {values.shape}: the loss needs one log-prob per "
                "step. For a vector action give the distribution an event "
                "axis: tfd.Independent(tfd.Normal(...), 1), "
                "tfd.MultivariateNormalDiag or "
                "tf_vtrace.distributions.diagonal_gaussian.")
        if not actions.shape.is_compatible_with(batch.concatenate(event)):
            raise ValueError(
                f"`actions{label}` must be `values`' shape plus the event shape "
                f"{event} of `dist_class`'s distribution, i.e. "
                f"{batch.concatenate(event)}; got shape {actions.shape}.")


def _action_log_probs(inputs, options, valid, dtype):
    """log π(a) (differentiable) and log μ(a) per head, and their `_Heads`.

    Padded steps get zero logits and action 0 first, so the log-probs (and
    their gradients) are finite whatever the padding held. The log-probs are
    per step, so the logits are never transposed to time-major: a transpose
    of [B, T, P] fused into the log-softmax made it 3x slower under XLA.
    """
    def heads(value, name):
        return _to_compute(_prepare_heads(value, name, valid), dtype)

    def log_probs(policy_heads):
        return vtrace.multi_log_probs_from_logits_and_actions(
            policy_heads, action_heads, options.dist_class, options.model,
            validate_args=options.validate_args)

    action_heads = _prepare_heads(inputs.actions, "actions", valid)
    if options.dist_class is not None:
        _check_distributions(inputs.target_policy_logits, action_heads, valid,
                             options)
    prepared = _Heads(heads(inputs.target_policy_logits, "target_policy_logits"),
                      None)
    if inputs.behaviour_action_log_probs is None:
        prepared = prepared._replace(behaviour=[tf.stop_gradient(h) for h in heads(
            inputs.behaviour_policy_logits, "behaviour_policy_logits")])
        behaviour = log_probs(prepared.behaviour)
    else:
        behaviour = heads(inputs.behaviour_action_log_probs,
                          "behaviour_action_log_probs")
    return log_probs(prepared.target), [tf.stop_gradient(b) for b in behaviour], prepared


def _time_major_sequences(inputs, values, options):
    """γ, r, V, the bootstrap value and λ in `values`' dtype, time-major."""
    discounts, rewards, bootstrap_value, lambda_ = (
        _checks.to_float_tensor(x, n, values.dtype) for x, n in (
            (inputs.discounts, "discounts"), (inputs.rewards, "rewards"),
            (inputs.bootstrap_value, "bootstrap_value"),
            (options.lambda_, "lambda_")))
    tm = functools.partial(_tensors.to_time_major, time_major=options.time_major)
    if lambda_.shape.rank:
        lambda_ = tm(lambda_)
    return tm(discounts), tm(rewards), tm(values), bootstrap_value, lambda_


def _vtrace_returns(masked, options):
    """vs and the policy-gradient advantages per `pg_target`, time-major."""
    returns = vtrace.from_importance_weights(
        *masked[:5], options.clip_rho_threshold, options.clip_pg_rho_threshold,
        clip_c_threshold=options.clip_c_threshold, lambda_=masked[5],
        alpha_=options.alpha_, time_major=True, jit_compile=options.jit_compile,
        scan=options.scan, validate_args=options.validate_args)
    if options.pg_target == "vs":
        return returns.vs, returns.pg_advantages
    # The core has checked the threshold already.
    return returns.vs, _lambda_return_advantages(
        returns.vs, *masked[:6], options.clip_pg_rho_threshold, options.alpha_)


def _targets_and_heads(inputs, options):
    """`VTraceTargets` from `LossInputs` and `VTraceOptions` (both already
    `_checked_inputs`), and the `_Heads` their log-probs came from (prepared
    once, for the loss too)."""
    values = _checks.to_float_tensor(inputs.values, "values")
    # The same permutation maps [B, T, ...] to [T, B, ...] and back.
    tm = functools.partial(_tensors.to_time_major, time_major=options.time_major)
    valid, truncated, truncation_values = _step_flags(inputs, values, options)
    valid_as_given = tm(valid)
    target_log_probs, behaviour_log_probs, heads = _action_log_probs(
        inputs, options, valid_as_given, values.dtype)
    log_rhos = _masking.where_valid(valid_as_given, vtrace.get_log_rhos(
        target_log_probs, behaviour_log_probs))
    discounts, rewards, values, bootstrap_value, lambda_ = _time_major_sequences(
        inputs, values, options)
    masked = _masking.masked_inputs(
        tf.stop_gradient(tm(log_rhos)), discounts, rewards, values,
        bootstrap_value, lambda_, valid, truncated, truncation_values)
    vs, pg_advantages = _vtrace_returns(masked, options)
    targets = VTraceTargets(
        vs=tm(vs), pg_advantages=tm(pg_advantages), log_rhos=log_rhos,
        target_action_log_probs=target_log_probs,
        behaviour_action_log_probs=behaviour_log_probs, valid=valid_as_given)
    return targets, heads


@_checks.enforced
def vtrace_targets(behaviour_policy_logits,
                   target_policy_logits,
                   actions,
                   discounts,
                   rewards,
                   values,
                   bootstrap_value,
                   *,
                   mask=None,
                   truncated=None,
                   truncation_values=None,
                   behaviour_action_log_probs=None,
                   pg_target="vs",
                   dist_class=None,
                   model=None,
                   clip_rho_threshold=1.0,
                   clip_pg_rho_threshold=1.0,
                   clip_c_threshold=1.0,
                   lambda_=1.0,
                   alpha_=1.0,
                   time_major=True,
                   jit_compile=True,
                   scan="auto",
                   validate_args=False,
                   name=None):
    r"""V-trace targets from logits, with padding, truncation and `pg_target`.

    `tf_vtrace.multi_from_logits` plus what unrolls from a real actor need:

    * `mask` (padding): steps where `mask` is false neither enter the recursion
      nor leak into valid steps; V(x_t) at the first padded step after a valid
      step is read as that step's bootstrap value, as the value over T + 1
      observations of a shorter unroll naturally places it.
    * `truncated` / `truncation_values` (time limits): a truncated step t ends
      its episode without terminating it, so its target bootstraps from
      V(x_{t+1}) of the episode's own final observation, given in
      `truncation_values[t]`, and not from the next step's value (the first
      observation of the next episode). Pass the non-terminal discount γ at a
      truncated step. Both vs and the advantage use it.
    * `pg_target`: the advantage target for λ < 1, ``"vs"`` (SEED RL, the
      core, default) r_t + γ_t vs_{t+1}, or ``"lambda_returns"`` (rlax)
      r_t + γ_t (λ vs_{t+1} + (1 − λ) V(x_{t+1})). Both agree when λ = 1.

    Half-precision inputs are computed in float32 and returned in float32.

    Args:
      behaviour_policy_logits: μ's parameters, [T, B, ..., P] or a list per
        head. Unused (may be None) when `behaviour_action_log_probs` is given.
      target_policy_logits: π's parameters, like `behaviour_policy_logits`.
      actions: The actions taken, [T, B, ...] or a list per head.
      discounts: γ_t, float [T, B, ...]; 0 where the episode terminated.
      rewards: r_t, float [T, B, ...].
      values: V(x_t), float [T, B, ...].
      bootstrap_value: V(x_T), float [B, ...].
      mask: Valid steps, bool or 0/1 [T, B, ...]; None: all valid.
      truncated: Steps that end an episode by a time limit, bool or 0/1
        [T, B, ...]; None: none.
      truncation_values: V(x_{t+1}) of the truncated episode's final
        observation, float [T, B, ...], read only where `truncated`.
      behaviour_action_log_probs: log μ(a_t) per head, instead of
        `behaviour_policy_logits`.
      pg_target: ``"vs"`` or ``"lambda_returns"``, see above.
      dist_class: As in `tf_vtrace.multi_from_logits`.
      model: As in `tf_vtrace.multi_from_logits`.
      clip_rho_threshold: ρ̄, a positive scalar or None.
      clip_pg_rho_threshold: ρ̄_pg, a positive scalar or None.
      clip_c_threshold: c̄, a positive scalar or None.
      lambda_: λ, a scalar or one value per step.
      alpha_: α in [0, 1], leaky V-trace's weight of the clipped ratios (in
        vs and in the advantage); 1 is V-trace. See
        `tf_vtrace.from_importance_weights`.
      time_major: If False, sequences are [B, T, ...] and so are the outputs.
      jit_compile: Compile the recursion with XLA.
      scan: ``"auto"``, ``"sequential"`` or ``"associative"``; see
        `tf_vtrace.from_importance_weights`.
      validate_args: Every check is always on (docs/api.md, "Shapes and
        checks"); True also refuses, when traced, to run inside a caller's
        XLA function, where a failed value check cannot raise (NaN there).
      name: Name scope of the ops.

    Returns:
      A `VTraceTargets`; its tensors are time-major iff `time_major`.

    Examples:
      >>> import tensorflow as tf
      >>> from tf_vtrace.impala import vtrace_targets
      >>> T, B, A = 3, 1, 2
      >>> out = vtrace_targets(
      ...     tf.zeros([T, B, A]), tf.zeros([T, B, A]), tf.zeros([T, B], tf.int32),
      ...     discounts=tf.ones([T, B]), rewards=tf.ones([T, B]),
      ...     values=tf.zeros([T, B]), bootstrap_value=tf.zeros([B]),
      ...     mask=[[True], [True], [False]])
      >>> tuple(float(v) for v in out.vs[:, 0])  # the padded step adds nothing
      (2.0, 1.0, 0.0)
    """
    inputs = _options.LossInputs(
        behaviour_policy_logits, target_policy_logits, actions, discounts,
        rewards, values, bootstrap_value, mask, truncated, truncation_values,
        behaviour_action_log_probs)
    options = _options.VTraceOptions(
        pg_target, clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold,
        lambda_, alpha_, dist_class=dist_class, model=model,
        time_major=time_major, jit_compile=jit_compile, scan=scan,
        validate_args=validate_args)
    with tf.name_scope(name or "vtrace_targets"):
        return _targets_and_heads(_checked_inputs(inputs, options), options)[0]


# --- The loss ----------------------------------------------------------------


def _distributions(heads, options):
    return [_tensors.make_distribution(h, options.dist_class, options.model)
            for h in heads]


def _entropy(target_dists, target_log_probs):
    """H(π), summed over heads; analytic where the distribution has it."""
    total = []
    for dist, log_prob in zip(target_dists, target_log_probs):
        try:
            total.append(dist.entropy())
        except NotImplementedError:
            # No closed form (e.g. a transformed distribution): −log π(a) is an
            # unbiased estimate only on-policy; documented in `impala_loss`.
            total.append(-log_prob)
    return tf.add_n(total)


def _kl(behaviour_dists, target_dists, target_log_probs,
        behaviour_log_probs):
    """KL(μ ‖ π), summed over heads; analytic where registered in tfp.

    Otherwise (or without behaviour logits) the sample estimate
    log μ(a) − log π(a), a ~ μ, as SEED RL uses.
    """
    if behaviour_dists is None:
        return tf.add_n([b - t for t, b in zip(target_log_probs,
                                               behaviour_log_probs)])
    total = []
    for mu, pi, t, b in zip(behaviour_dists, target_dists, target_log_probs,
                            behaviour_log_probs):
        try:
            total.append(tfd.kl_divergence(mu, pi))
        except NotImplementedError:
            total.append(b - t)
    return tf.add_n(total)


def _is_zero(cost):
    return isinstance(cost, (int, float)) and cost == 0


def _weighted(cost, term, like):
    """cost · term per step; zeros shaped like `like` when `cost` is the
    Python number 0, so that neither the term (the KL: a third of a learner
    step, docs/performance.md) nor its zero gradient is computed for the loss.
    """
    return tf.zeros_like(like) if _is_zero(cost) else cost * term


def _global_sum(value, cross_replica):
    """Σ over the replicas of a `tf.distribute` strategy, else `value`."""
    context = tf.distribute.get_replica_context()
    if (not cross_replica or context is None
            or context.num_replicas_in_sync == 1):
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def _masked_mean(tensor, valid_float):
    # Σ tensor · valid as a dot product: XLA merged `reduce_sum(tensor * valid)`
    # with the entropy's and the KL's own sums over the actions into one
    # reduction over [T, B, A], done as a slow reduce-window (0.3 ms each at
    # T=100, B=256, A=18; docs/performance.md).
    return tf.math.divide_no_nan(tf.tensordot(tensor, valid_float, tensor.shape.rank),
                                 tf.reduce_sum(valid_float))


def _step_counts(valid_float):
    """The local number of steps and of valid steps, for the denominators."""
    return {"mean": tf.cast(tf.size(valid_float), valid_float.dtype),
            "masked_mean": tf.reduce_sum(valid_float)}


def _denominator(reduction, counts, cross_replica):
    if reduction == "sum":
        return None
    return tf.maximum(_global_sum(counts[reduction], cross_replica), 1.)


def _per_step_terms(targets, values, entropy, kl, costs):
    """The weighted loss terms ℓ_t of `impala_loss`, per step."""
    return {
        "policy_loss": -tf.add_n(targets.target_action_log_probs)
                       * targets.pg_advantages,
        "baseline_loss": costs.baseline_cost * 0.5 * tf.square(targets.vs - values),
        "entropy_loss": -_weighted(costs.entropy_cost, entropy, targets.vs),
        "kl_loss": _weighted(costs.kl_cost, kl, targets.vs),
    }


def _ess_fraction(log_rhos, valid, valid_float):
    """ESS / N = (Σ ρ)² / (N Σ ρ²) over the N valid steps (Kong's effective
    sample size of the unclipped ratios, as a fraction: 1 when every ρ is
    equal, 1/N when one step carries all the weight; 0 without valid steps).

    Computed from w = ρ / max ρ, which leaves the fraction unchanged and
    stays finite where ρ itself overflows (a product over many dimensions).
    """
    largest = tf.reduce_max(tf.where(valid, log_rhos, log_rhos.dtype.min))
    weights = tf.where(valid, tf.exp(log_rhos - largest), 0.)
    return tf.math.divide_no_nan(
        tf.square(tf.reduce_sum(weights)),
        tf.reduce_sum(tf.square(weights)) * tf.reduce_sum(valid_float))


def _diagnostics(targets, entropy, kl, valid_float, options):
    """Masked means of the V-trace and policy statistics (local batch)."""
    log_rhos = tf.stop_gradient(targets.log_rhos)

    def clipped_fraction(threshold):
        if threshold is None:
            return tf.zeros([], valid_float.dtype)
        log_threshold = tf.math.log(tf.cast(threshold, log_rhos.dtype))
        clipped = tf.cast(log_rhos > log_threshold + CLIPPED_LOG_RATIO_MARGIN,
                          valid_float.dtype)
        return _masked_mean(clipped, valid_float)

    return {
        "mean_rho": _masked_mean(tf.exp(log_rhos), valid_float),
        "rho_clipped_fraction": clipped_fraction(options.clip_rho_threshold),
        "c_clipped_fraction": clipped_fraction(options.clip_c_threshold),
        "ess_fraction": _ess_fraction(log_rhos, targets.valid, valid_float),
        "entropy": _masked_mean(tf.stop_gradient(entropy), valid_float),
        "kl": _masked_mean(tf.stop_gradient(kl), valid_float),
    }


def _loss_sums(inputs, options, costs, with_diagnostics):
    """The loss summed over valid steps, the summed terms, counts, statistics.

    Everything of `impala_loss` but the reduction's denominator, which may
    need a cross-replica sum and so stays outside any compiled function.
    Without diagnostics, a KL with cost 0 is not computed at all.
    """
    with tf.name_scope("vtrace_targets"):
        targets, heads = _targets_and_heads(inputs, options)
    dtype, valid = targets.vs.dtype, targets.valid
    values = tf.cast(_masking.where_valid(valid, tf.convert_to_tensor(inputs.values)),
                     dtype)
    target_dists = _distributions(heads.target, options)
    behaviour_dists = (None if heads.behaviour is None
                       else _distributions(heads.behaviour, options))
    entropy = _entropy(target_dists, targets.target_action_log_probs)
    kl = None
    if with_diagnostics or not _is_zero(costs.kl_cost):
        kl = _kl(behaviour_dists, target_dists, targets.target_action_log_probs,
                 targets.behaviour_action_log_probs)
    term_sums = {key: tf.reduce_sum(_masking.where_valid(valid, term)) for key, term
                 in _per_step_terms(targets, values, entropy, kl, costs).items()}
    valid_float = tf.cast(valid, dtype)
    diagnostics = {}
    if with_diagnostics:
        diagnostics = _diagnostics(targets, entropy, kl, valid_float, options)
    return (tf.add_n(list(term_sums.values())), term_sums,
            _step_counts(valid_float), diagnostics)


@_checks.enforced
def impala_loss(behaviour_policy_logits,
                target_policy_logits,
                actions,
                discounts,
                rewards,
                values,
                bootstrap_value,
                *,
                mask=None,
                truncated=None,
                truncation_values=None,
                behaviour_action_log_probs=None,
                baseline_cost=0.5,
                entropy_cost=0.00025,
                kl_cost=0.0,
                reduction="sum",
                pg_target="vs",
                dist_class=None,
                model=None,
                clip_rho_threshold=1.0,
                clip_pg_rho_threshold=1.0,
                clip_c_threshold=1.0,
                lambda_=1.0,
                alpha_=1.0,
                time_major=True,
                jit_compile=True,
                scan="auto",
                validate_args=False,
                cross_replica=True,
                with_diagnostics=True,
                name=None):
    r"""The IMPALA loss and its diagnostics, for custom training loops.

    Per valid step (see the module doc for the reductions):

        ℓ_t = − log π(a_t|x_t) · A_t + baseline_cost · ½ (vs_t − V(x_t))²
              − entropy_cost · H(π(·|x_t)) + kl_cost · KL(μ(·|x_t) ‖ π(·|x_t))

    with vs_t and A_t from `vtrace_targets` (no gradient), so the gradient
    reaches the policy through log π, H and KL and the value through V. H and
    KL are analytic where tfp has them (Categorical does), else the sample
    estimates −log π(a) and log μ(a) − log π(a). Defaults are scalable_agent's:
    baseline_cost 0.5, entropy_cost 0.00025, sums (the paper tunes
    entropy_cost per task).

    Distribution: inside `tf.distribute` replica context (`strategy.run`,
    Keras `fit` under a strategy), the denominators of ``"mean"`` and
    ``"masked_mean"`` are summed over replicas, as `tf.nn.compute_average_loss`
    divides by the global batch: each replica returns its share of the global
    loss, and the gradient all-reduce (a sum) gives the one-device gradient.

    Half-precision logits or values (mixed precision) are computed in float32;
    the loss is float32.

    Args:
      behaviour_policy_logits: μ's parameters, [T, B, ..., P] or a list per
        head (None with `behaviour_action_log_probs`).
      target_policy_logits: π's parameters, like `behaviour_policy_logits`.
      actions: The actions, [T, B, ...] or a list per head (integers for the
        default Categorical heads).
      discounts: γ_t, float [T, B, ...]; 0 where the episode terminated.
      rewards: r_t, float [T, B, ...].
      values: V(x_t), float [T, B, ...], differentiable.
      bootstrap_value: V(x_T), float [B, ...].
      mask: Valid steps, bool or 0/1 [T, B, ...]; see `vtrace_targets`.
      truncated: Time-limit ends, bool or 0/1 [T, B, ...]; see `vtrace_targets`.
      truncation_values: V(x_{t+1}) of the truncated final observations.
      behaviour_action_log_probs: log μ(a_t) per head, instead of logits (the KL
        then uses the sample estimate).
      baseline_cost: Weight of the value loss ½ (vs − V)².
      entropy_cost: Weight of the entropy bonus (subtracted).
      kl_cost: Weight of KL(μ ‖ π).
      reduction: ``"sum"``, ``"mean"`` or ``"masked_mean"``.
      pg_target: ``"vs"`` (SEED RL) or ``"lambda_returns"`` (rlax).
      dist_class: As in `tf_vtrace.multi_from_logits`.
      model: As in `tf_vtrace.multi_from_logits`.
      clip_rho_threshold: ρ̄, a positive scalar or None.
      clip_pg_rho_threshold: ρ̄_pg, a positive scalar or None.
      clip_c_threshold: c̄, a positive scalar or None.
      lambda_: λ, a scalar or one value per step.
      alpha_: Leaky V-trace's α in [0, 1]; see `vtrace_targets`.
      time_major: If False, every sequence is [B, T, ...] (Keras layout).
      jit_compile: Compile with XLA (default). With the default Categorical
        heads, tensor inputs and `validate_args=False`, the whole loss (log-
        probs, V-trace, the terms, and under a `GradientTape` its gradient
        with respect to the target logits and the values) runs as one XLA
        call, wherever it is called: eagerly, in a plain `tf.function`
        (Keras `fit` on CPU) or in a `jit_compile=True` one. Otherwise
        (a `dist_class`, numpy or Python inputs) the
        log-probs and the recursion are compiled separately.
      scan: ``"auto"``, ``"sequential"`` or ``"associative"``; see
        `tf_vtrace.from_importance_weights`.
      validate_args: Every check is always on (docs/api.md, "Shapes and
        checks"); True also refuses, when traced, to run inside a caller's
        XLA function, where a failed value check cannot raise (NaN there).
      cross_replica: Sum the denominators over replicas (see above); False
        reduces over the local batch only.
      with_diagnostics: Compute the diagnostics (default). False returns an
        empty dict in their place and spares the compiled call their work
        (the KL among them): a step that drops them should say so, since
        outside XLA the call computes every output it has (a quarter of
        the loss and gradient at T=100, B=256, A=18 in a plain
        `tf.function`, docs/performance.md).
      name: Name scope of the ops.

    Returns:
      `(loss, diagnostics)`: the scalar float32 loss and a dict (no gradient
      through it; empty with ``with_diagnostics=False``) with the weighted,
      reduced terms ``policy_loss``, ``baseline_loss``,
      ``entropy_loss`` (negative: −entropy_cost·H) and ``kl_loss``, which sum
      to the loss, and masked means over the local batch of ``mean_rho``
      (unclipped ρ), ``rho_clipped_fraction`` (the fraction of steps with
      ρ > e^0.001·ρ̄ ≈ 1.001·ρ̄: float noise of an on-policy ρ = 1 does not count),
      ``c_clipped_fraction`` (ρ > e^0.001·c̄), ``ess_fraction`` (ESS / N,
      the effective sample size (Σρ)² / Σρ² of the unclipped ratios over the
      N valid steps, divided by N: 1 when all ρ are equal), ``entropy`` and
      ``kl``. ρ is the joint ratio, a product over heads (and over the
      dimensions of a vector action): at a given lag per dimension ESS / N
      falls as the dimensions grow, and ρ strays further from 1 both ways
      (`tf_vtrace.distributions`).

    Examples:
      >>> import tensorflow as tf
      >>> from tf_vtrace.impala import impala_loss
      >>> T, B, A = 4, 2, 3
      >>> logits = tf.zeros([T, B, A])
      >>> loss, diags = impala_loss(
      ...     logits, logits, tf.zeros([T, B], tf.int32),
      ...     discounts=tf.fill([T, B], 0.9), rewards=tf.ones([T, B]),
      ...     values=tf.zeros([T, B]), bootstrap_value=tf.zeros([B]),
      ...     entropy_cost=0.0, reduction="mean")
      >>> round(float(diags["mean_rho"]), 4), round(float(diags["entropy"]), 4)
      (1.0, 1.0986)
      >>> bool(abs(loss - sum(diags[k] for k in
      ...     ("policy_loss", "baseline_loss", "entropy_loss", "kl_loss"))) < 1e-5)
      True
    """
    inputs = _options.LossInputs(
        behaviour_policy_logits, target_policy_logits, actions, discounts,
        rewards, values, bootstrap_value, mask, truncated, truncation_values,
        behaviour_action_log_probs)
    options = _options.VTraceOptions(
        pg_target, clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold,
        lambda_, alpha_, dist_class=dist_class, model=model,
        time_major=time_major, jit_compile=jit_compile, scan=scan,
        validate_args=validate_args)
    costs = _options.LossCosts(
        baseline_cost=baseline_cost, entropy_cost=entropy_cost, kl_cost=kl_cost,
        reduction=reduction, cross_replica=cross_replica)
    if not isinstance(with_diagnostics, bool):
        raise TypeError("`with_diagnostics` must be a bool, got "
                        f"{with_diagnostics!r}.")
    return _reduced_loss(inputs, options, costs, name, with_diagnostics)


def _reduced_loss(inputs, options, costs, name, with_diagnostics):
    """`impala_loss` from its records; `with_diagnostics=False` returns an
    empty dict and spares the compiled call their work."""
    _checks.check_loss_costs(costs, REDUCTIONS)
    with tf.name_scope(name or "impala_loss"):
        inputs = _checked_inputs(inputs, options)
        sums = _fused.fused_loss_sums(_loss_sums, inputs, options, costs,
                                      with_diagnostics)
        total, term_sums, counts, diagnostics = (
            sums if sums is not None
            else _loss_sums(inputs, options, costs, with_diagnostics))
        denominator = _denominator(costs.reduction, counts, costs.cross_replica)
        loss = total if denominator is None else total / denominator
        if with_diagnostics:
            for key, term in term_sums.items():
                term = tf.stop_gradient(term)
                diagnostics[key] = term if denominator is None else term / denominator
        return loss, diagnostics


def _loss_without_diagnostics(inputs, options, costs):
    """The loss of `impala_loss` alone, from its records, for Keras'
    `Loss.call`: the compiled call skips the diagnostics (the KL among them)."""
    return _reduced_loss(inputs, options, costs, None, with_diagnostics=False)[0]
