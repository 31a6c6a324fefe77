r"""V-trace: the off-policy actor-critic targets of IMPALA.

Espeholt, Soyer, Munos et al. (2018), "IMPALA: Scalable Distributed Deep-RL
with Importance Weighted Actor-Learner Architectures", section 4.

A behaviour policy μ generated a trajectory x_0, a_0, r_0, ..., x_T; we want
value targets and policy-gradient advantages for a target policy π. With the
importance ratios ρ_t = π(a_t | x_t) / μ(a_t | x_t):

    clipped rhos      min(ρ̄, ρ_t)
    traces            c_t = λ · min(c̄, ρ_t)
    TD errors         δ_t = min(ρ̄, ρ_t) · (r_t + γ_t V(x_{t+1}) − V(x_t))
    targets (eq. 1)   vs_s = V(x_s) + Σ_{t=s}^{T−1} (Π_{i=s}^{t−1} γ_i c_i) δ_t
    recursion         vs_s − V(x_s) = δ_s + γ_s c_s (vs_{s+1} − V(x_{s+1}))
    advantages        A_s = min(ρ̄_pg, ρ_s) · (r_s + γ_s vs_{s+1} − V(x_s))

with vs_T = V(x_T) = `bootstrap_value`. γ_t is the per-step discount: zero at a
terminal step, which cuts the sums there. ρ̄ sets the fixed point of the value
targets (the value of a policy between μ and π); c̄ only sets how far traces
reach (the contraction speed); ρ̄_pg plays ρ̄'s role for the policy gradient.
λ < 1 shortens the traces further, as in Retrace(λ) / TD(λ). With ρ_t = 1
(on-policy) vs − V is the GAE(λ) advantage; with λ = 1 as well, vs is the
n-step Bellman target.

This module is the math only: the Keras loss and layer, and the SavedModel
export, are separate modules that import it; the compiled kernel's caches are
in `_kernel_cache`, eager dispatch in `_dispatch`. The API follows the V-trace
modules of scalable_agent and RLlib (`from_importance_weights`, `from_logits`,
`multi_from_logits`), so code written against them ports by changing the import.
"""

import collections

import tensorflow as tf

from tf_vtrace import _checks, _dispatch, _kernel_cache, _tensors

__all__ = [
    "VTraceReturns",
    "VTraceFromLogitsReturns",
    "from_importance_weights",
    "from_logits",
    "multi_from_logits",
    "log_probs_from_logits_and_actions",
    "multi_log_probs_from_logits_and_actions",
    "get_log_rhos",
]

class VTraceReturns(
        collections.namedtuple("VTraceReturns", ["vs", "pg_advantages"])):
    """V-trace targets.

    Attributes:
      vs: The value targets vs_t, shaped like `values`. Regress V(x_t) on them.
      pg_advantages: min(ρ̄_pg, ρ_t)(r_t + γ_t vs_{t+1} − V(x_t)), shaped like
        `values`: the advantage that multiplies ∇ log π(a_t | x_t).
    """
    __slots__ = ()


class VTraceFromLogitsReturns(
        collections.namedtuple(
            "VTraceFromLogitsReturns",
            ["vs", "pg_advantages", "log_rhos", "behaviour_action_log_probs",
             "target_action_log_probs"])):
    """V-trace targets with the log-probs they came from.

    Attributes:
      vs: The value targets vs_t (no gradient).
      pg_advantages: The policy-gradient advantages (no gradient).
      log_rhos: log ρ_t = log π(a_t | x_t) − log μ(a_t | x_t), summed over
        action heads; differentiable with respect to the target logits.
      behaviour_action_log_probs: log μ(a_t | x_t): a tensor from
        `from_logits`, a list with one tensor per head from `multi_from_logits`.
      target_action_log_probs: log π(a_t | x_t), differentiable; a tensor or a
        list per head like `behaviour_action_log_probs`.
    """
    __slots__ = ()


# --- The recursion -----------------------------------------------------------


# How the recursion runs: `scan=` of the public functions (docs/performance.md).
SCANS = ("auto", "sequential", "associative")


def _sequential_reverse_discounted_sum(deltas, decays):
    """acc_t = δ_t + decay_t · acc_{t+1}, acc_T = 0: T steps of a reversed `tf.scan`.

    This is eq. (1) of the paper written backwards: one pass instead of the
    O(T²) sum. (Running several steps per iteration was measured slower under
    XLA at large T and B; see docs/performance.md.)
    """
    def step(acc_next, elements):
        delta, decay = elements
        return delta + decay * acc_next

    return tf.scan(step, (deltas, decays), initializer=tf.zeros_like(deltas[0]),
                   reverse=True)


def _associative_reverse_discounted_sum(deltas, decays):
    """The same acc_t in ⌈log₂ T⌉ rounds of whole-sequence arithmetic.

    Step t is the affine map x ↦ δ_t + decay_t · x, and acc_t applies the
    maps of steps t, t+1, ..., T−1 to acc_T = 0. Composing two affine maps
    gives an affine map, so a doubling (Hillis–Steele) scan works: after the
    round with offset k, (gain_t, sum_t) is the composition of the 2k maps
    from step t on (fewer near the end, where steps past T count as the zero
    map), and sum_t = acc_t once 2k ≥ T. Each round is elementwise over all of
    [T, B, ...], so the depth is log T rather than T: the width a GPU or TPU
    can use. It does about log₂ T times the arithmetic of the sequential scan.

    The gains Π decay are formed explicitly. With c̄ (or λ·γ) above 1 they can
    overflow where the sequential scan, which never forms them, stays finite.
    """
    num_steps = tf.shape(deltas)[0]
    step_index = tf.reshape(tf.range(num_steps),
                            [-1] + [1] * (deltas.shape.rank - 1))

    def compose_with_later(offset, gains, sums):
        # The maps starting `offset` steps later; past T, the zero map.
        in_range = step_index + offset < num_steps
        later_gains = tf.where(in_range, tf.roll(gains, -offset, axis=0), 0.)
        later_sums = tf.where(in_range, tf.roll(sums, -offset, axis=0), 0.)
        return offset * 2, gains * later_gains, sums + gains * later_sums

    _, _, sums = tf.while_loop(
        lambda offset, gains, sums: offset < num_steps, compose_with_later,
        (tf.constant(1), decays, deltas))
    return sums


def _resolve_scan(scan, num_steps):
    """`scan` as "sequential" or "associative"; "auto" picks per T.

    On CPU the sequential scan measured faster at every T from 20 to 10,000
    (benchmarks/scan_crossover.py, docs/performance.md), so "auto" runs it.
    """
    del num_steps  # No measured crossover yet; kept so "auto" can use T.
    return "sequential" if scan == "auto" else scan


def _reverse_discounted_sum(deltas, decays, scan):
    """acc_t = δ_t + decay_t · acc_{t+1}, acc_T = 0, along axis 0 (time)."""
    if scan == "associative":
        return _associative_reverse_discounted_sum(deltas, decays)
    return _sequential_reverse_discounted_sum(deltas, decays)


def _vtrace_time_major(log_rhos, discounts, rewards, values, bootstrap_value,
                       hyperparameters, scan="sequential"):
    """V-trace on time-major tensors of one dtype; see the module docstring."""
    (lambda_, clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold,
     alpha_) = hyperparameters
    clipped_rhos = _tensors.clipped_ratio(log_rhos, clip_rho_threshold, alpha_)
    # λ may be a scalar or per-step; broadcasting pins the traces' shape even
    # when the trace was generalized over λ's rank.
    lambdas = tf.broadcast_to(_tensors.as_dtype(lambda_, log_rhos.dtype),
                              tf.shape(log_rhos))
    cs = lambdas * _tensors.clipped_ratio(log_rhos, clip_c_threshold, alpha_)
    values_t_plus_1 = _tensors.shift_in_bootstrap(values, bootstrap_value)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)
    vs = values + _reverse_discounted_sum(deltas, discounts * cs, scan)

    vs_t_plus_1 = _tensors.shift_in_bootstrap(vs, bootstrap_value)
    clipped_pg_rhos = _tensors.clipped_ratio(log_rhos, clip_pg_rho_threshold, alpha_)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return vs, pg_advantages


def _vtrace_kernel(log_rhos, discounts, rewards, values, bootstrap_value,
                   hyperparameters, time_major, scan="sequential"):
    """`_vtrace_time_major` in the caller's layout and dtype: the body that
    `_kernel_cache` compiles, with `hyperparameters` a
    `_kernel_cache.Hyperparameters`.

    The layout and dtype plumbing lives inside the compiled function too, so
    an eager call costs one dispatch rather than a dozen small eager ops.
    """
    dtype = values.dtype
    compute_dtype = tf.float32 if dtype in _checks.HALF_DTYPES else dtype

    def prepare(tensor, is_sequence=True):
        tensor = tf.cast(tensor, compute_dtype)
        return _tensors.to_time_major(tensor, time_major) if is_sequence else tensor

    if tf.is_tensor(hyperparameters.lambda_):
        hyperparameters = hyperparameters._replace(
            lambda_=prepare(hyperparameters.lambda_))
    vs, pg_advantages = _vtrace_time_major(
        prepare(log_rhos), prepare(discounts), prepare(rewards), prepare(values),
        prepare(bootstrap_value, is_sequence=False), hyperparameters, scan)
    return (tf.cast(_tensors.to_time_major(vs, time_major), dtype),
            tf.cast(_tensors.to_time_major(pg_advantages, time_major), dtype))


# --- Public entry points -----------------------------------------------------


def _broadcast_sequences(sequences, shape):
    """Each tensor broadcast to the common `shape` where it has a size-1 axis.

    Tensors that have the shape already pass through: the usual call adds no
    op. `_kernel_cache.call_kernel` gives the outputs the shape of the
    broadcast `values`.
    """
    target = shape.static.as_list()

    def needs_broadcast(tensor):
        return any(dim == 1 and size != 1
                   for dim, size in zip(tensor.shape.as_list(), target))

    if not any(needs_broadcast(t) for t in sequences):
        return sequences
    dynamic = shape.dynamic()
    broadcast = []
    for tensor in sequences:
        if needs_broadcast(tensor):
            tensor = tf.broadcast_to(tensor, dynamic)
            tensor.set_shape(shape.static)
        broadcast.append(tensor)
    return broadcast


def _prepare_thresholds(thresholds):
    """ρ̄, ρ̄_pg, c̄ checked (numbers, scalar tensors or None)."""
    return [_checks.check_threshold(threshold, name)
            for name, threshold in thresholds.items()]


@_checks.enforced
def from_importance_weights(log_rhos,
                            discounts,
                            rewards,
                            values,
                            bootstrap_value,
                            clip_rho_threshold=1.0,
                            clip_pg_rho_threshold=1.0,
                            *,
                            clip_c_threshold=1.0,
                            lambda_=1.0,
                            alpha_=1.0,
                            time_major=True,
                            jit_compile=True,
                            scan="auto",
                            validate_args=False,
                            name=None):
    r"""V-trace targets from log importance weights log ρ_t.

    With ρ_t = exp(`log_rhos`), V = `values`, vs_T = V(x_T) = `bootstrap_value`:

        δ_t  = min(ρ̄, ρ_t) (r_t + γ_t V(x_{t+1}) − V(x_t))
        c_t  = λ_t min(c̄, ρ_t)
        vs_t = V(x_t) + δ_t + γ_t c_t (vs_{t+1} − V(x_{t+1}))
        A_t  = min(ρ̄_pg, ρ_t) (r_t + γ_t vs_{t+1} − V(x_t))

    computed by a reversed `tf.scan` over time. The ratios are clipped in log
    space, so both outputs stay finite for any finite `log_rhos` whenever the
    thresholds are set. Neither output carries a gradient (they are targets).

    Leaky V-trace (`alpha_` = α < 1; Zahavy et al. 2020, rlax's
    `leaky_vtrace`) replaces each of the three clipped ratios by
    α·min(threshold, ρ_t) + (1 − α)·ρ_t: in δ_t, in c_t (inside λ_t) and in
    A_t. α = 1 is V-trace; α = 0 is plain importance sampling. The unclipped
    part (1 − α)·ρ_t is not bounded: it overflows to inf where ρ_t does (log ρ
    above about 88 in float32, 709 in float64), while the clipped part stays
    in log space.

    Shapes: the sequence inputs (`log_rhos`, `discounts`, `rewards`, `values`
    and a per-step `lambda_`) have one rank and broadcast as in
    scalable_agent, trfl and RLlib: the same T, and every other axis the
    same size or size 1 (known when traced), e.g. [T, B, 1] ratios and
    discounts with [T, B, K] rewards and values. The outputs have the
    broadcast shape and `bootstrap_value` has it without the T axis. Ranks
    are checked before shapes.

    Args:
      log_rhos: log π(a_t|x_t) − log μ(a_t|x_t), float [T, B, ...].
      discounts: γ_t, float [T, B, ...]: the discount from step t to t+1,
        zero where the episode terminated at step t.
      rewards: r_t, float [T, B, ...].
      values: V(x_t) under the target policy, float [T, B, ...]. Its dtype is
        the dtype of the computation and of the outputs (float16/bfloat16 run
        in float32): every other float input — Python number, numpy array or
        tensor, e.g. gymnasium's float64 rewards — is cast to it, eagerly and
        in graphs alike.
      bootstrap_value: V(x_T), float [B, ...] of the broadcast shape.
      clip_rho_threshold: ρ̄, a positive scalar, or None for no clipping.
      clip_pg_rho_threshold: ρ̄_pg, a positive scalar, or None for no clipping.
      clip_c_threshold: c̄, a positive scalar, or None for no clipping.
      lambda_: λ in [0, 1], a scalar or a tensor shaped like `rewards` (one
        per step). A Python number (here and for the thresholds) other than 1
        enters the compiled kernel as an input: a schedule that changes it
        every call compiles nothing new. A tensor's value is checked when
        the kernel runs (a ValueError eagerly, an assert in a graph).
      alpha_: α in [0, 1], leaky V-trace's weight of the clipped ratios
        (a number or a scalar tensor); 1 (default) is V-trace.
      time_major: If False, every sequence input and output is [B, T, ...].
      jit_compile: Compile the recursion with XLA (default). Either way it
        runs inside a caller's `tf.function`, `jit_compile=True` function,
        `GradientTape`, or eagerly. Inside a caller's `tf.function`, the
        fastest step is the caller's own `tf.function(jit_compile=True)`:
        a plain one calls the compiled kernel as a nested function, which
        costs a dispatch (docs/performance.md).
      scan: How the recursion runs: ``"sequential"`` (a reversed `tf.scan`,
        T steps), ``"associative"`` (⌈log₂ T⌉ rounds over the whole
        sequence: the depth a GPU or TPU can use at long T, about log₂ T
        times the arithmetic), or ``"auto"`` (default: the one measured
        faster for the size; on CPU, sequential).
      validate_args: Every check is always on (docs/api.md, "Shapes and
        checks"); True also refuses, when traced, to run inside a caller's
        XLA function, where a failed value check cannot raise (NaN there).
      name: Name scope of the ops.

    Returns:
      A `VTraceReturns(vs, pg_advantages)`, each typed like `values` and
      shaped like the broadcast sequence inputs.

    Raises:
      TypeError: An input is not floating point.
      ValueError: A rank does not match ("must have rank", checked first), a
        known dimension does not broadcast, or a threshold is not positive.

    Examples:
      >>> import tensorflow as tf, tf_vtrace
      >>> T, B = 5, 2
      >>> out = tf_vtrace.from_importance_weights(
      ...     log_rhos=tf.zeros([T, B]), discounts=tf.fill([T, B], 0.9),
      ...     rewards=tf.ones([T, B]), values=tf.zeros([T, B]),
      ...     bootstrap_value=tf.zeros([B]))
      >>> [round(float(v), 4) for v in out.vs[:, 0]]  # on-policy: discounted returns
      [4.0951, 3.439, 2.71, 1.9, 1.0]
    """
    eager = tf.executing_eagerly()
    if eager:
        signature, outputs = _kernel_cache.call_remembered(
            (log_rhos, discounts, rewards, values, bootstrap_value),
            (lambda_, clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold,
             alpha_), (jit_compile, time_major, scan), validate_args)
        if outputs is not None:
            return VTraceReturns(*outputs)
    _checks.check_choice(scan, "scan", SCANS)
    _checks.check_flags(time_major=time_major, jit_compile=jit_compile,
                        validate_args=validate_args)
    _checks.refuse_unraisable(validate_args)
    with tf.name_scope(name or "from_importance_weights"):
        tensors, lambda_, shape, asserts = _checks.check_sequences(
            log_rhos, discounts, rewards, values, bootstrap_value, lambda_,
            time_major)
        thresholds = _prepare_thresholds(
            {"clip_rho_threshold": clip_rho_threshold,
             "clip_pg_rho_threshold": clip_pg_rho_threshold,
             "clip_c_threshold": clip_c_threshold})
        alpha_ = _checks.check_alpha(alpha_)
        per_step_lambda = tf.is_tensor(lambda_) and bool(lambda_.shape.rank)
        sequences = tensors[:4] + ([lambda_] if per_step_lambda else [])
        sequences = _broadcast_sequences(
            _checks.with_dependencies(asserts, sequences), shape)
        if per_step_lambda:
            lambda_ = sequences.pop()
        vs, pg_advantages = _kernel_cache.call_kernel(
            _vtrace_kernel, jit_compile, time_major, (*sequences, tensors[4]),
            (lambda_, *thresholds, alpha_),
            _resolve_scan(scan, sequences[3].shape[0 if time_major else 1]))
    if eager:
        _kernel_cache.remember(_vtrace_kernel, signature, _resolve_scan(scan, None))
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


# --- Log-probabilities from policy parameters --------------------------------


def _categorical_log_prob_body(logits, actions):
    """log softmax(logits)[action], as tfp's Categorical log_prob, fused by XLA;
    and whether every action is in [0, P).

    The taken action is picked by a one-hot contraction rather than a gather
    (or tfp's sparse cross-entropy): its gradient, softmax − one-hot, is
    elementwise and fuses with the rest of a learner step, where a gather's
    is a scatter (docs/performance.md). An action outside [0, P) gives NaN, as
    XLA's sparse cross-entropy does, rather than a silent 0; the flag lets the
    caller raise it outside the compiled call (`_checks.require`).
    """
    num_actions = tf.shape(logits)[-1]
    one_hot = tf.one_hot(actions, num_actions, dtype=logits.dtype)
    log_probs = tf.reduce_sum(tf.nn.log_softmax(logits) * one_hot, axis=-1)
    in_range = tf.logical_and(actions >= 0, actions < tf.cast(num_actions,
                                                              actions.dtype))
    return (tf.where(in_range, log_probs, tf.constant(float("nan"), logits.dtype)),
            tf.reduce_all(in_range))


# Two traced functions: one for fully known shapes, one for the rest. A trace
# with unknown dimensions (a Keras model's symbolic call) would otherwise serve
# every later call whose shape it covers, and an agent learner's step that
# called such a trace recompiled its XLA program at every update (0.30 of
# 0.41 s; docs/performance.md). No reduce_retracing, for the same reason.
_CATEGORICAL_LOG_PROB = {
    exact: tf.function(_categorical_log_prob_body, jit_compile=True)
    for exact in (True, False)}


def _categorical_log_prob(logits, actions):
    """`_categorical_log_prob_body` as one XLA call, traced per exact shape
    where the shapes are fully known; eagerly, called flat."""
    if not tf.executing_eagerly():
        return _CATEGORICAL_LOG_PROB[_dispatch.shapes_known([logits, actions])](
            logits, actions)
    flat = [logits, actions]
    return _dispatch.call_concrete(_dispatch.concrete_function(
        _CATEGORICAL_LOG_PROB[True], flat, flat), flat)


_ACTIONS_IN_RANGE = ("`actions` must be in [0, P), P the number of logits (the "
                     "logits' last axis), for Categorical heads.")


# Integer dtypes whose every value an int32 holds; the others index in int64.
_INT32_SAFE = (tf.int8, tf.int16, tf.int32, tf.uint8, tf.uint16)


def _categorical_action_indices(policy_logits, actions):
    """Integer actions of any dtype as int32/int64 indices in [0, num_actions).

    The log-prob's one-hot takes int32 or int64 indices (as tfp's
    Categorical does); int8, int16 and the unsigned types are cast first, to a
    dtype that holds every value, so the range check sees the true action.
    (A uint64 above 2**63 becomes negative in int64, which the check reports.)
    """
    if not actions.dtype.is_integer:
        raise TypeError(
            "`actions` must be integers for Categorical heads (dist_class=None), "
            f"got dtype {actions.dtype.name}. Keras 3 casts y_true to float: "
            "cast actions back with tf.cast(actions, tf.int32).")
    if actions.shape.rank is not None and policy_logits.shape.rank is not None:
        if actions.shape.rank != policy_logits.shape.rank - 1:
            raise ValueError(
                f"`actions` with shape {actions.shape} must have one axis fewer "
                f"than the logits with shape {policy_logits.shape} (the logits' "
                "last axis indexes actions).")
    index_dtype = tf.int32 if actions.dtype in _INT32_SAFE else tf.int64
    return tf.cast(actions, index_dtype)


def _check_logits_and_actions(policy_logits, actions):
    """Categorical actions are the logits' shape without its last axis,
    exactly; checked when traced, and when run where a dim is unknown."""
    expected = policy_logits.shape[:-1] if policy_logits.shape.rank else None
    if expected is not None and not actions.shape.is_compatible_with(expected):
        raise ValueError(
            f"`actions` has shape {actions.shape} but must be the logits' shape "
            f"without the last axis, {expected} (no axis broadcasts).")
    if expected is None or (expected.is_fully_defined()
                            and actions.shape.is_fully_defined()):
        return
    _checks.require(tf.reduce_all(tf.equal(tf.shape(actions, tf.int64),
                                           tf.shape(policy_logits, tf.int64)[:-1])),
                    "`actions` must be the logits' shape without the last axis.")


@_checks.enforced
def log_probs_from_logits_and_actions(policy_logits, actions, dist_class=None,
                                      model=None, *, validate_args=False):
    """log p(actions) under the distribution that `policy_logits` parameterize.

    Args:
      policy_logits: A head's parameters, float [T, B, ..., P]. For the default
        Categorical head these are unnormalized log-probabilities over P actions.
      actions: The actions taken: integer [T, B, ...] of any integer dtype
        (int8 to int64, uint8 to uint64) for Categorical heads, otherwise
        whatever the distribution's `log_prob` takes.
      dist_class: None for `tfp.distributions.Categorical(logits=...)`, or a
        callable `dist_class(policy_logits)` (or `dist_class(policy_logits,
        model)` when `model` is given, as in RLlib) returning a tfp
        Distribution whose `log_prob(actions)` is [T, B, ...].
      model: Whatever `dist_class` needs besides the parameters, for
        distributions that depend on more than the logits (RLlib passes its
        ModelV2 here, e.g. for autoregressive heads). When not None the head
        is built as `dist_class(policy_logits, model)`; ignored (and not
        needed) for the default Categorical head.
      validate_args: Categorical actions are always checked to be in range
        (a ValueError eagerly, an assert in a graph, NaN log-probs inside a
        caller's XLA function, where nothing can raise); True refuses the
        last case when traced.

    Returns:
      The log-probabilities, [T, B, ...].

    Examples:
      >>> import tensorflow as tf, tf_vtrace
      >>> logits = tf.math.log([[[0.25, 0.75]]])  # T=1, B=1, two actions
      >>> log_probs = tf_vtrace.log_probs_from_logits_and_actions(logits, [[1]])
      >>> round(float(tf.exp(log_probs)[0, 0]), 4)
      0.75
    """
    with tf.name_scope("log_probs_from_logits_and_actions"):
        policy_logits = _checks.to_tensor(policy_logits, "policy_logits")
        actions = _checks.to_tensor(actions, "actions")
        if dist_class is not None:
            return _tensors.make_distribution(policy_logits, dist_class, model).log_prob(
                actions)
        _checks.refuse_unraisable(validate_args)
        _check_logits_and_actions(policy_logits, actions)
        actions = _categorical_action_indices(policy_logits, actions)
        log_probs, in_range = _categorical_log_prob(policy_logits, actions)
        _checks.require(in_range, _ACTIONS_IN_RANGE)
        log_probs.set_shape(tf.broadcast_static_shape(
            actions.shape, policy_logits.shape[:-1]))
        return log_probs


def multi_log_probs_from_logits_and_actions(policy_logits, actions,
                                            dist_class=None, model=None, *,
                                            validate_args=False):
    """`log_probs_from_logits_and_actions` for each head of a list.

    Args:
      policy_logits: A list with one parameter tensor per action head.
      actions: A list with one action tensor per head.
      dist_class: As in `log_probs_from_logits_and_actions`, shared by heads.
      model: As in `log_probs_from_logits_and_actions`.
      validate_args: As in `log_probs_from_logits_and_actions`.

    Returns:
      A list with one [T, B, ...] log-probability tensor per head.
    """
    policy_logits, actions = list(policy_logits), list(actions)
    if len(policy_logits) != len(actions):
        raise ValueError(
            f"`actions` has {len(actions)} heads but the logits have "
            f"{len(policy_logits)}; pass one entry per action head.")
    return [
        log_probs_from_logits_and_actions(
            logits, head_actions, dist_class, model, validate_args=validate_args)
        for logits, head_actions in zip(policy_logits, actions)]


def get_log_rhos(target_action_log_probs, behaviour_action_log_probs):
    """log ρ_t = Σ_heads (log π_head(a_t) − log μ_head(a_t)).

    The joint action's probability is the product over independent heads, so
    its log-ratio is the sum of the heads' log-ratios (target minus behaviour).

    Args:
      target_action_log_probs: A list with one [T, B, ...] tensor per head.
      behaviour_action_log_probs: A list like `target_action_log_probs`.

    Returns:
      log ρ, [T, B, ...].
    """
    for name, heads in (("target_action_log_probs", target_action_log_probs),
                        ("behaviour_action_log_probs",
                         behaviour_action_log_probs)):
        # A bare [T, B] tensor would be iterated over time and summed: wrong.
        if not isinstance(heads, (list, tuple)):
            raise TypeError(
                f"`{name}` must be a list with one tensor per action head, got "
                f"{type(heads).__name__}; wrap a single head as [log_probs].")
    target = list(target_action_log_probs)
    behaviour = list(behaviour_action_log_probs)
    if len(target) != len(behaviour) or not target:
        raise ValueError(
            "`target_action_log_probs` and `behaviour_action_log_probs` must be "
            f"non-empty lists of equal length; got {len(target)} and "
            f"{len(behaviour)}.")
    return tf.add_n([t - b for t, b in zip(target, behaviour)])


@_checks.enforced
def multi_from_logits(behaviour_policy_logits,
                      target_policy_logits,
                      actions,
                      discounts,
                      rewards,
                      values,
                      bootstrap_value,
                      dist_class=None,
                      model=None,
                      behaviour_action_log_probs=None,
                      clip_rho_threshold=1.0,
                      clip_pg_rho_threshold=1.0,
                      *,
                      clip_c_threshold=1.0,
                      lambda_=1.0,
                      alpha_=1.0,
                      time_major=True,
                      jit_compile=True,
                      scan="auto",
                      validate_args=False,
                      name=None):
    r"""V-trace for policies with several action heads.

    The heads' log-probabilities are summed: log ρ_t = Σ_k (log π_k(a_t^k) −
    log μ_k(a_t^k)), then `from_importance_weights` computes the targets.

    Args:
      behaviour_policy_logits: A list with one [T, B, ..., P_k] parameter tensor
        per head for μ. Unused when `behaviour_action_log_probs` is given.
      target_policy_logits: A list with one [T, B, ..., P_k] tensor per head
        for π (log-probs are differentiable with respect to these).
      actions: A list with one action tensor per head, [T, B, ...].
      discounts: γ_t, float [T, B, ...].
      rewards: r_t, float [T, B, ...].
      values: V(x_t), float [T, B, ...].
      bootstrap_value: V(x_T), float [B, ...].
      dist_class: None (Categorical) or a callable building a tfp Distribution
        from one head's parameters; see `log_probs_from_logits_and_actions`.
      model: Passed to `dist_class` as `dist_class(logits, model)` when not
        None; see `log_probs_from_logits_and_actions`.
      behaviour_action_log_probs: Precomputed log μ_k(a_t^k), a list with one
        tensor per head (or one tensor for one head); used instead of
        recomputing from `behaviour_policy_logits`.
      clip_rho_threshold: ρ̄, a positive scalar, or None.
      clip_pg_rho_threshold: ρ̄_pg, a positive scalar, or None.
      clip_c_threshold: c̄, a positive scalar, or None.
      lambda_: λ, a scalar or one value per step.
      alpha_: Leaky V-trace's α, see `from_importance_weights`.
      time_major: If False, all sequences (logits and actions too) are
        [B, T, ...] and so are the outputs.
      jit_compile: Compile the recursion with XLA.
      scan: ``"auto"``, ``"sequential"`` or ``"associative"``; see
        `from_importance_weights`.
      validate_args: Every check is always on (docs/api.md, "Shapes and
        checks"); True also refuses, when traced, to run inside a caller's
        XLA function, where a failed value check cannot raise (NaN there).
      name: Name scope of the ops.

    Returns:
      A `VTraceFromLogitsReturns` whose two log-prob fields are lists, one
      tensor per head.

    Examples:
      >>> import tensorflow as tf, tf_vtrace
      >>> T, B = 3, 2
      >>> heads = [tf.zeros([T, B, 4]), tf.zeros([T, B, 2])]
      >>> out = tf_vtrace.multi_from_logits(
      ...     heads, heads, [tf.zeros([T, B], tf.int32)] * 2,
      ...     discounts=tf.fill([T, B], 0.9), rewards=tf.ones([T, B]),
      ...     values=tf.zeros([T, B]), bootstrap_value=tf.zeros([B]))
      >>> len(out.target_action_log_probs), float(tf.reduce_max(tf.abs(out.log_rhos)))
      (2, 0.0)
    """
    with tf.name_scope(name or "multi_from_logits"):
        values = _checks.to_float_tensor(values, "values")
        target_policy_logits = _checks.to_head_tensors(target_policy_logits,
                                                       "target_policy_logits")
        actions = _checks.to_head_tensors(actions, "actions")
        behaviour_logits = None if behaviour_action_log_probs is not None else (
            _checks.to_head_tensors(behaviour_policy_logits, "behaviour_policy_logits"))
        asserts = _checks.check_heads(target_policy_logits, behaviour_logits,
                                      actions, values, dist_class is None)
        target_action_log_probs = multi_log_probs_from_logits_and_actions(
            target_policy_logits, actions, dist_class, model,
            validate_args=validate_args)
        if behaviour_logits is not None:
            behaviour_action_log_probs = multi_log_probs_from_logits_and_actions(
                behaviour_logits, actions, dist_class, model,
                validate_args=validate_args)
        else:
            behaviour_action_log_probs = _checks.to_head_tensors(
                behaviour_action_log_probs, "behaviour_action_log_probs")
        for log_probs, log_probs_name in (
                (target_action_log_probs, "target_action_log_probs"),
                (behaviour_action_log_probs, "behaviour_action_log_probs")):
            asserts += _checks.check_head_log_probs(log_probs, log_probs_name, values)
        (log_rhos,) = _checks.with_dependencies(asserts, [get_log_rhos(
            target_action_log_probs, behaviour_action_log_probs)])
        returns = from_importance_weights(
            log_rhos, discounts, rewards, values, bootstrap_value,
            clip_rho_threshold, clip_pg_rho_threshold,
            clip_c_threshold=clip_c_threshold, lambda_=lambda_, alpha_=alpha_,
            time_major=time_major, jit_compile=jit_compile, scan=scan,
            validate_args=validate_args)
        return VTraceFromLogitsReturns(
            vs=returns.vs,
            pg_advantages=returns.pg_advantages,
            log_rhos=log_rhos,
            behaviour_action_log_probs=behaviour_action_log_probs,
            target_action_log_probs=target_action_log_probs)


def from_logits(behaviour_policy_logits,
                target_policy_logits,
                actions,
                discounts,
                rewards,
                values,
                bootstrap_value,
                dist_class=None,
                model=None,
                clip_rho_threshold=1.0,
                clip_pg_rho_threshold=1.0,
                *,
                clip_c_threshold=1.0,
                lambda_=1.0,
                alpha_=1.0,
                time_major=True,
                jit_compile=True,
                scan="auto",
                validate_args=False,
                name=None):
    r"""V-trace for a single-head policy given as logits.

    log ρ_t = log π(a_t | x_t) − log μ(a_t | x_t) with both log-probs from
    `dist_class` (default: `tfp.distributions.Categorical` over the logits'
    last axis), then `from_importance_weights`.

    Args:
      behaviour_policy_logits: μ's parameters, float [T, B, ..., P].
      target_policy_logits: π's parameters, float [T, B, ..., P].
      actions: The actions taken under μ, [T, B, ...] (integers for Categorical).
      discounts: γ_t, float [T, B, ...].
      rewards: r_t, float [T, B, ...].
      values: V(x_t), float [T, B, ...].
      bootstrap_value: V(x_T), float [B, ...].
      dist_class: None (Categorical) or a callable building a tfp Distribution
        from the parameters (continuous heads too).
      model: Passed to `dist_class` as `dist_class(logits, model)` when not
        None; see `log_probs_from_logits_and_actions`.
      clip_rho_threshold: ρ̄, a positive scalar, or None.
      clip_pg_rho_threshold: ρ̄_pg, a positive scalar, or None.
      clip_c_threshold: c̄, a positive scalar, or None.
      lambda_: λ, a scalar or one value per step.
      alpha_: Leaky V-trace's α, see `from_importance_weights`.
      time_major: If False, all sequences and outputs are [B, T, ...].
      jit_compile: Compile the recursion with XLA.
      scan: ``"auto"``, ``"sequential"`` or ``"associative"``; see
        `from_importance_weights`.
      validate_args: Every check is always on (docs/api.md, "Shapes and
        checks"); True also refuses, when traced, to run inside a caller's
        XLA function, where a failed value check cannot raise (NaN there).
      name: Name scope of the ops.

    Returns:
      A `VTraceFromLogitsReturns` with single tensors in every field.

    Examples:
      >>> import tensorflow as tf, tf_vtrace
      >>> T, B, A = 4, 3, 6
      >>> out = tf_vtrace.from_logits(
      ...     behaviour_policy_logits=tf.random.normal([T, B, A]),
      ...     target_policy_logits=tf.random.normal([T, B, A]),
      ...     actions=tf.random.uniform([T, B], maxval=A, dtype=tf.int32),
      ...     discounts=tf.fill([T, B], 0.99), rewards=tf.ones([T, B]),
      ...     values=tf.zeros([T, B]), bootstrap_value=tf.zeros([B]))
      >>> out.vs.shape, out.log_rhos.shape
      (TensorShape([4, 3]), TensorShape([4, 3]))
    """
    returns = multi_from_logits(
        [behaviour_policy_logits], [target_policy_logits], [actions], discounts,
        rewards, values, bootstrap_value, dist_class, model,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold, lambda_=lambda_, alpha_=alpha_,
        time_major=time_major, jit_compile=jit_compile, scan=scan,
        validate_args=validate_args, name=name or "from_logits")
    return returns._replace(
        behaviour_action_log_probs=returns.behaviour_action_log_probs[0],
        target_action_log_probs=returns.target_action_log_probs[0])
