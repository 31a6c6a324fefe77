r"""The IMPALA loss, a V-trace layer and diagnostics metrics for Keras.

Keras data are batch-major: a batch holds B unrolls of T steps. The model sees
T + 1 observations per unroll and outputs the policy logits and the value for
each; the value of the last observation is the bootstrap value V(x_T), its
logits are unused.

A Keras loss gets one `y_true` and one `y_pred`. Keras 3 refuses a loss over
differently structured targets and outputs ("y_true and y_pred have different
structures") and casts every target to float, so both are packed tensors:

* `y_pred` [B, T + 1, ΣP + 1]: the logits of each head, then the value —
  `keras.layers.Concatenate()([logits, value])` with `value` from `Dense(1)`;
* `y_true` [B, T, 5 + H + ΣP]: built by `pack_targets` from the natural
  per-step arrays (actions, rewards, discounts, behaviour logits, optional
  padding mask and truncation), in the layout `TARGET_COLUMNS` names.

The same layout works in Keras 3 and tf_keras. `ImpalaLoss` checks the widths
and says how to build the tensors when they do not match; it casts the packed
actions back to integers for Categorical heads.

Continuous actions (a diagonal Gaussian over D dimensions) travel as D heads
of two parameters each, mean and log-std, with
``ImpalaLoss(action_sizes=[2] * D, dist_class=tf_vtrace.distributions.normal)``:
`GaussianParams` lays a mean [B, T + 1, D] and a log-std (the model's, or a
learned state-independent vector of its own) out as those heads, and
`pack_targets` takes the actions [B, T, D] and μ's parameters [B, T, 2·D] as
they are. The loss sums the heads' log-probabilities, entropies and KLs: the
diagonal Gaussian's.
"""

import collections.abc

import tensorflow as tf

from tf_vtrace import _checks, _fused, _options, _tf_private, distributions, impala


def _keras():
    """The Keras that `tf.keras` is: Keras 3, or tf_keras when
    TF_USE_LEGACY_KERAS=1 was set before TensorFlow was imported."""
    if _checks.legacy_keras_active():
        import tf_keras
        return tf_keras
    import keras as keras3
    return keras3


keras = _keras()

__all__ = [
    "TARGET_COLUMNS",
    "pack_targets",
    "unpack_targets",
    "unpack_predictions",
    "ImpalaLoss",
    "ImpalaMetric",
    "impala_metrics",
    "VTrace",
    "GaussianParams",
]

# The per-step scalars at the front of the packed `y_true`; then one action
# column per head, then the behaviour logits of each head.
TARGET_COLUMNS = ("rewards", "discounts", "mask", "truncated",
                  "truncation_values")

_register = keras.saving.register_keras_serializable(package="tf_vtrace")
# The Gaussian heads' `dist_class`es, so that a saved ImpalaLoss names them.
_register(distributions.normal)
_register(distributions.diagonal_gaussian)


def _head_list(heads):
    return list(heads) if isinstance(heads, (list, tuple)) else [heads]


def _as_float(value, name, bools=False):
    """`value` as float32; bools (a mask, truncation flags) only if `bools`."""
    if not bools:
        _checks.refuse_bool(value, name)
    return tf.cast(_checks.to_tensor(value, name), tf.float32)


def pack_targets(actions, rewards, discounts, behaviour_policy_logits, *,
                 mask=None, truncated=None, truncation_values=None):
    """Packs an unroll batch into the `y_true` tensor that `ImpalaLoss` reads.

    Args:
      actions: The actions taken, [B, T] (integers for Categorical heads), a
        list with one [B, T] tensor per action head, or [B, T, H] with the H
        heads on the last axis (e.g. the D dimensions of a Gaussian action).
      rewards: r_t, [B, T].
      discounts: γ_t, [B, T]: 0 where the episode terminated at step t.
      behaviour_policy_logits: μ's logits, [B, T, P], or a list per head.
      mask: Valid steps (1) and padding (0), [B, T]; default all valid.
      truncated: 1 where the episode was cut by a time limit at step t, [B, T].
      truncation_values: V(x_{t+1}) of the truncated final observation, [B, T],
        read only where `truncated` (see `tf_vtrace.impala.vtrace_targets`).

    Returns:
      A float32 tensor [B, T, 5 + H + ΣP]: `TARGET_COLUMNS`, then the H action
      columns, then the heads' logits.

    Examples:
      >>> import numpy as np
      >>> from tf_vtrace.keras import pack_targets
      >>> y = pack_targets(actions=np.zeros([2, 5], int), rewards=np.ones([2, 5]),
      ...                  discounts=np.full([2, 5], 0.99),
      ...                  behaviour_policy_logits=np.zeros([2, 5, 3]))
      >>> y.shape  # 5 per-step columns + 1 action + 3 logits
      TensorShape([2, 5, 9])
    """
    with tf.name_scope("pack_targets"):
        rewards = _as_float(rewards, "rewards")
        if rewards.shape.rank != 2:
            raise ValueError(
                f"`rewards` must be [B, T] (batch-major), got shape {rewards.shape}.")
        ones = tf.ones_like(rewards)
        columns = [rewards, _as_float(discounts, "discounts"),
                   ones if mask is None else _as_float(mask, "mask", bools=True),
                   0. * ones if truncated is None else _as_float(
                       truncated, "truncated", bools=True),
                   0. * ones if truncation_values is None else _as_float(
                       truncation_values, "truncation_values")]
        action_columns = [_as_float(a, "actions", bools=True)
                          for a in _head_list(actions)]
        if len(action_columns) == 1 and action_columns[0].shape.rank == 3:
            action_columns = tf.unstack(action_columns[0], axis=-1)
        columns += action_columns
        names = TARGET_COLUMNS + ("actions",) * len(action_columns)
        for column, name in zip(columns, names):
            if column.shape.rank != 2 or not column.shape.is_compatible_with(
                    rewards.shape):
                raise ValueError(
                    f"`{name}` must be [B, T] like `rewards` {rewards.shape}, got "
                    f"shape {column.shape}.")
        logits = [_as_float(head_logits, "behaviour_policy_logits")
                  for head_logits in _head_list(behaviour_policy_logits)]
        for head in logits:
            if head.shape.rank != 3:
                raise ValueError(
                    "`behaviour_policy_logits` must be [B, T, P] per head, got "
                    f"shape {head.shape}.")
        return tf.concat([tf.stack(columns, axis=-1)] + logits, axis=-1)


def _check_target_width(y_true, action_sizes):
    """Raises unless `y_true` is [B, T, 5 + H + ΣP] for `action_sizes`."""
    num_heads = len(action_sizes)
    width = len(TARGET_COLUMNS) + num_heads + sum(action_sizes)
    if y_true.shape.rank != 3 or y_true.shape[-1] not in (None, width):
        raise ValueError(
            f"`y_true` must be the [B, T, {width}] tensor of "
            "`tf_vtrace.keras.pack_targets(actions, rewards, discounts, "
            f"behaviour_policy_logits, ...)` for action_sizes {list(action_sizes)}"
            f" ({len(TARGET_COLUMNS)} per-step columns, {num_heads} action "
            f"column(s), {sum(action_sizes)} logits); got shape {y_true.shape}.")


def unpack_targets(y_true, action_sizes):
    """Splits a `pack_targets` tensor into a dict of its named parts.

    Args:
      y_true: The packed tensor [B, T, 5 + H + ΣP].
      action_sizes: The number of logits P of each head, a list of H ints.

    Returns:
      A dict with `TARGET_COLUMNS`' [B, T] tensors, ``actions`` and
      ``behaviour_policy_logits`` (lists with one tensor per head).
    """
    action_sizes = _checks.check_action_sizes(action_sizes)
    _check_target_width(y_true, action_sizes)
    num_heads = len(action_sizes)
    parts = {name: y_true[..., i] for i, name in enumerate(TARGET_COLUMNS)}
    start = len(TARGET_COLUMNS)
    parts["actions"] = [y_true[..., start + h] for h in range(num_heads)]
    start += num_heads
    logits = []
    for size in action_sizes:
        logits.append(y_true[..., start:start + size])
        start += size
    parts["behaviour_policy_logits"] = logits
    return parts


def _prediction_sizes(y_pred, action_sizes):
    """The logits per head of the packed `y_pred` [B, T + 1, ΣP + 1], checked."""
    if y_pred.shape.rank != 3 or y_pred.shape[-1] is None:
        raise ValueError(
            "`y_pred` must be [B, T + 1, ΣP + 1] with a known last axis: the "
            "model's logits for T + 1 observations, then the value, e.g. "
            "keras.layers.Concatenate()([logits, value]); got shape "
            f"{y_pred.shape}.")
    sizes = (_checks.check_action_sizes(action_sizes) if action_sizes is not None
             else [y_pred.shape[-1] - 1])
    if sum(sizes) + 1 != y_pred.shape[-1]:
        raise ValueError(
            f"`y_pred` has {y_pred.shape[-1]} channels but action_sizes {sizes} "
            f"need {sum(sizes) + 1}: the logits of each head, then the value "
            f"{_CONCATENATE}.")
    return sizes


# How a model with separate logits and value outputs gives the packed y_pred.
_CONCATENATE = ("(a model with two outputs [logits, value] must output one "
                "tensor: keras.layers.Concatenate()([logits, value]))")


def _check_prediction_width(y_true, y_pred, action_sizes):
    """With one head inferred from `y_pred` (`action_sizes` None), blames
    `y_pred` when it holds the logits alone or the value alone, of the width
    `y_true` says: a model that left out the value column, or one with two
    outputs [logits, value] that tf_keras hands the loss one by one."""
    if action_sizes is not None or y_true.shape.rank != 3 or y_pred.shape.rank != 3:
        return
    width, channels = y_true.shape[-1], y_pred.shape[-1]
    logits = None if width is None else width - len(TARGET_COLUMNS) - 1
    if logits is not None and logits >= 1 and channels in (logits, 1):
        raise ValueError(
            f"`y_pred` has {channels} channels but `y_true` (width {width}: "
            f"one head of {logits} logits, action_sizes=None) needs {logits + 1}:"
            f" the logits, then the value {_CONCATENATE}; for several heads "
            "pass `action_sizes`.")


def unpack_predictions(y_pred, action_sizes=None):
    """Splits the packed model output [B, T + 1, ΣP + 1] into logits and values.

    Args:
      y_pred: The model output: each head's logits, then the value.
      action_sizes: The number of logits of each head; None for one head of
        `y_pred.shape[-1] - 1` logits.

    Returns:
      A dict with ``policy_logits`` (a list with one [B, T + 1, P] tensor per
      head) and ``values`` [B, T + 1].
    """
    sizes = _prediction_sizes(y_pred, action_sizes)
    # `tf.split`, not slices: its gradient is a concat, where a slice's
    # (StridedSliceGrad) took 2.7 ms per slice at B=256, T=100, 18 actions.
    *logits, values = tf.split(y_pred, sizes + [1], axis=-1)
    return {"policy_logits": logits, "values": tf.squeeze(values, -1)}


def _split_last_step(sequence):
    """[B, T + 1, ...] → ([B, T, ...], [B, ...]), by `tf.split` (see above)."""
    steps, last = tf.split(sequence, [-1, 1], axis=1)
    return steps, tf.squeeze(last, 1)


def _check_time_axes(y_true, y_pred):
    steps, observations = y_true.shape[1], y_pred.shape[1]
    if steps is not None and observations is not None and observations != steps + 1:
        raise ValueError(
            f"`y_pred` covers {observations} observations but `y_true` has "
            f"{steps} steps: the model must output T + 1 = {steps + 1} "
            "(the last value is the bootstrap value V(x_T)).")


def _loss_inputs(y_true, y_pred, action_sizes, dist_class):
    """The `impala_loss` inputs (`LossInputs`) from (packed or dict) y_true,
    y_pred."""
    if isinstance(y_pred, collections.abc.Mapping):
        preds = {"policy_logits": _head_list(y_pred["policy_logits"]),
                 "values": y_pred["values"]}
    if isinstance(y_true, collections.abc.Mapping):
        y_true = pack_targets(**y_true)
    if not isinstance(y_pred, collections.abc.Mapping):
        _check_prediction_width(y_true, y_pred, action_sizes)
        preds = unpack_predictions(y_pred, action_sizes)
    sizes = [p.shape[-1] for p in preds["policy_logits"]]
    targets = unpack_targets(y_true, sizes)
    _check_time_axes(y_true, preds["values"])
    actions = targets["actions"]
    if dist_class is None:
        # Keras 3 casts y_true to float; the actions are exact small ints.
        actions = [tf.cast(tf.round(a), tf.int32) for a in actions]
    values, bootstrap_value = _split_last_step(preds["values"])
    return _options.LossInputs(
        behaviour_policy_logits=targets["behaviour_policy_logits"],
        target_policy_logits=[_split_last_step(p)[0]
                              for p in preds["policy_logits"]],
        actions=actions, discounts=targets["discounts"],
        rewards=targets["rewards"], values=values,
        bootstrap_value=bootstrap_value, mask=targets["mask"],
        truncated=targets["truncated"],
        truncation_values=targets["truncation_values"])


def _checked_packed(y_true, y_pred, action_sizes):
    """The packed tensors held to their layout before the compiled call, whose
    trace may not know their sizes: widths, T + 1 and B (a run-time assert
    where unknown when traced, outside any XLA function)."""
    _check_prediction_width(y_true, y_pred, action_sizes)
    _check_target_width(y_true, _prediction_sizes(y_pred, action_sizes))
    _check_time_axes(y_true, y_pred)
    if not y_true.shape[:1].is_compatible_with(y_pred.shape[:1]):
        raise ValueError(
            f"`y_true` has shape {y_true.shape} but `y_pred` has shape "
            f"{y_pred.shape}: both hold the same B unrolls along axis 0.")
    known = y_true.shape[:2].is_fully_defined() and y_pred.shape[:2].is_fully_defined()
    if known or _tf_private.in_xla_context():
        return y_true, y_pred
    ok = tf.reduce_all(tf.equal(tf.shape(y_true)[:2] + [0, 1], tf.shape(y_pred)[:2]))
    assertion = tf.debugging.Assert(ok, [
        "`y_pred` must be [B, T + 1, ...] for `y_true` [B, T, ...]; shapes:",
        tf.shape(y_true), tf.shape(y_pred)], name="tf_vtrace_packed_shapes")
    return _checks.with_dependencies([assertion], [y_true, y_pred])


def _packed_loss_sums(static, tensors):
    """The summed loss and step counts from the packed (y_true, y_pred): the
    body of `_packed_loss`' compiled call, unpacking included."""
    action_sizes, options, costs = static[:3]
    y_true, y_pred, valid = tensors
    inputs = impala._checked_inputs(
        _loss_inputs(y_true, y_pred, action_sizes, None)._replace(mask=valid), options)
    total, _, counts, _ = impala._loss_sums(inputs, options, costs, False)
    return total, counts


def _packed_prediction(tensors):
    return [tensors[1]]


def _packed_loss(y_true, y_pred, action_sizes, options, costs):
    """`ImpalaLoss`' loss in one XLA call that takes the packed y_true and
    y_pred as they are and returns d loss / d y_pred whole: the unpacking
    (slices and their gradient, a concat) runs inside the call, not as
    separate ops of Keras' train step. None where that cannot run (a
    `dist_class`, `jit_compile=False`, dict inputs, tensor options)."""
    if (options.dist_class is not None or not options.jit_compile
            or not (tf.is_tensor(y_true) and tf.is_tensor(y_pred))):
        return None
    # The widths key the compiled function too: its trace, relaxed to unknown
    # B and T as new batches come, must still read the packed layout.
    static = (None if action_sizes is None else tuple(action_sizes), options, costs,
              y_true.shape[-1], y_pred.shape[-1])
    try:
        hash(static)
    except TypeError:  # e.g. a cost held in a tf.Variable
        return None
    # A variable is read out here, where the caller's tape records the read.
    y_true, y_pred = _checked_packed(tf.convert_to_tensor(y_true),
                                     tf.convert_to_tensor(y_pred), action_sizes)
    # The mask as bool out here, where it measured faster than inside the
    # call (docs/performance.md); inside, `_masking` keeps the compare out of
    # the loops that mask the logits, which it would stop vectorizing.
    valid = tf.not_equal(y_true[..., TARGET_COLUMNS.index("mask")], 0.)
    total, counts = _fused.compiled_call(
        _packed_loss_sums, _packed_prediction, static, (y_true, y_pred, valid))
    denominator = impala._denominator(costs.reduction, counts, costs.cross_replica)
    return total if denominator is None else total / denominator


class _VTraceOptionsOwner:
    """The V-trace options of a Keras loss or layer, kept as one record.

    Its hyperparameters read as attributes too (``loss.lambda_``), read-only:
    the record the loss or layer computes with is the one it serializes.
    """

    def _store_vtrace_options(self, options):
        # Checked here, so that a loaded config (a .keras file) is too.
        _checks.check_choice(options.pg_target, "pg_target", impala.PG_TARGETS)
        _checks.check_hyperparameters(options)
        self._vtrace = options

    def _vtrace_config(self):
        return dict(_options.hyperparameters(self._vtrace),
                    jit_compile=self._vtrace.jit_compile)


def _read_only_option(name):
    return property(lambda self: getattr(self._vtrace, name),
                    doc=f"The `{name}` the targets are computed with.")


for _name in _options.VTRACE_HYPERPARAMETERS:
    setattr(_VTraceOptionsOwner, _name, _read_only_option(_name))
del _name


def _reported_as_global_mean(share):
    """A replica's share of the global loss L, valued L / N for Keras' tracker.

    Keras 3 and tf_keras both report the loss of a batch under N replicas as
    Σ_r b_r · (N · loss_r) / Σ_r b_r (the tracker gets N · loss_r, weighed by
    the replica's local batch size b_r), which is right for local means but
    not for shares summing to L when the b_r differ (a last, partial batch;
    an empty replica). With every replica valued L / N the tracker gets
    b · L, as on one device, while the gradient stays that of the share, so
    the summed gradients are still the one-device gradient.
    """
    replicas = _replicas_in_sync()
    if replicas == 1:
        return share
    global_mean = impala._global_sum(tf.stop_gradient(share), True) / replicas
    return share + tf.stop_gradient(global_mean - share)


def _replicas_in_sync():
    """N, the replicas of the `tf.distribute` replica context (1 outside)."""
    context = tf.distribute.get_replica_context()
    return 1 if context is None else context.num_replicas_in_sync


@_register
class ImpalaLoss(_VTraceOptionsOwner, keras.losses.Loss):
    r"""The IMPALA loss as a Keras loss: `model.compile(loss=ImpalaLoss())`.

    A thin face over `tf_vtrace.impala.impala_loss` (see it for the terms, the
    reductions and the distribution behaviour): `y_true` is the
    `pack_targets` tensor [B, T, 5 + H + ΣP] and `y_pred` the model's packed
    output [B, T + 1, ΣP + 1] (logits, then value, for T + 1 observations; the
    last value bootstraps). A model with two outputs [logits, value] outputs
    `keras.layers.Concatenate()([logits, value])` instead: Keras maps one loss
    over a list of outputs one output at a time (Keras 3 raises a KeyError,
    "The path: (0,) in the `loss` argument", before any loss runs).

    `call` returns the reduced scalar, so the Keras reduction
    (`self.reduction`) is fixed to ``"sum"``, a no-op on a scalar that Keras
    divides by no replica count: the IMPALA reduction is `reduction`
    (`self.impala_reduction`). Under a `tf.distribute` strategy
    each replica's value is L / N, the global loss over the N replicas, and
    its gradient that of the replica's share, so that Keras reports the
    one-device loss even for a batch split unequally (docs/tutorials/keras.md).

    Args:
      baseline_cost: Weight of ½ (vs − V)² (scalable_agent: 0.5).
      entropy_cost: Weight of the entropy bonus (scalable_agent: 0.00025).
      kl_cost: Weight of KL(μ ‖ π) (default 0: off).
      reduction: ``"sum"`` (scalable_agent), ``"mean"`` (SEED RL) or
        ``"masked_mean"``.
      pg_target: ``"vs"`` (SEED RL, default) or ``"lambda_returns"`` (rlax).
      clip_rho_threshold: ρ̄, a positive float or None.
      clip_pg_rho_threshold: ρ̄_pg, a positive float or None.
      clip_c_threshold: c̄, a positive float or None.
      lambda_: λ, a float.
      alpha_: Leaky V-trace's α in [0, 1], a float (1: V-trace).
      action_sizes: The number of logits of each action head; None for one
        head (its size is read from `y_pred`).
      dist_class: None (Categorical; packed actions are cast back to int) or a
        registered-serializable callable building a tfp distribution.
      jit_compile: Compile with XLA (default). With Categorical heads and
        packed tensors the whole loss runs as one XLA call: the unpacking of
        `y_true` and `y_pred`, the log-probs, V-trace, the terms and, in
        `fit`, d loss / d `y_pred`, whether or not the model compiles with
        XLA (docs/performance.md, "Keras `fit`").
      name: The loss name.

    Examples:
      >>> import numpy as np, tensorflow as tf
      >>> from tf_vtrace.keras import ImpalaLoss, pack_targets
      >>> B, T, A = 2, 4, 3
      >>> y_true = pack_targets(np.zeros([B, T], int), np.ones([B, T]),
      ...                       np.full([B, T], 0.9), np.zeros([B, T, A]))
      >>> y_pred = tf.zeros([B, T + 1, A + 1])  # logits and value, T + 1 steps
      >>> loss = ImpalaLoss(entropy_cost=0.0)
      >>> round(float(loss(y_true, y_pred)), 4)
      31.7731
    """

    def __init__(self, baseline_cost=0.5, entropy_cost=0.00025, kl_cost=0.0,
                 reduction="sum", pg_target="vs", clip_rho_threshold=1.0,
                 clip_pg_rho_threshold=1.0, clip_c_threshold=1.0, lambda_=1.0,
                 action_sizes=None, dist_class=None, jit_compile=True,
                 name="impala_loss", alpha_=1.0):
        super().__init__(name=name, reduction="sum")
        if isinstance(dist_class, (str, dict)):
            dist_class = keras.saving.deserialize_keras_object(dist_class)
        self._store_vtrace_options(_options.VTraceOptions(
            # The hyperparameters in `_options.VTRACE_HYPERPARAMETERS` order.
            pg_target, clip_rho_threshold, clip_pg_rho_threshold,
            clip_c_threshold, lambda_, alpha_,
            dist_class=dist_class, time_major=False, jit_compile=jit_compile))
        self.baseline_cost = baseline_cost
        self.entropy_cost = entropy_cost
        self.kl_cost = kl_cost
        self.impala_reduction = reduction
        self.action_sizes = (None if action_sizes is None
                             else _checks.check_action_sizes(action_sizes))
        _checks.check_loss_costs(self._costs(cross_replica=True), impala.REDUCTIONS)

    @property
    def dist_class(self):
        """The distribution of the heads (None: Categorical)."""
        return self._vtrace.dist_class

    def _unpack(self, y_true, y_pred):
        """The `impala_loss` arguments from (packed or dict) y_true, y_pred."""
        return _loss_inputs(y_true, y_pred, self.action_sizes, self.dist_class)

    def loss_and_diagnostics(self, y_true, y_pred, cross_replica=True):
        """`(loss, diagnostics)` as `tf_vtrace.impala.impala_loss` returns them.

        Args:
          y_true: The packed targets (or a dict of `pack_targets` arguments).
          y_pred: The packed model output (or a dict with ``policy_logits``
            and ``values`` over T + 1 observations).
          cross_replica: As in `impala_loss`.

        Returns:
          The scalar loss and the dict of diagnostics.
        """
        return impala.impala_loss(
            **self._unpack(y_true, y_pred)._asdict(), **self._vtrace._asdict(),
            **self._costs(cross_replica)._asdict())

    def _costs(self, cross_replica):
        return _options.LossCosts(
            baseline_cost=self.baseline_cost, entropy_cost=self.entropy_cost,
            kl_cost=self.kl_cost, reduction=self.impala_reduction,
            cross_replica=cross_replica)

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Keras would scale the reduced scalar by each weight and sum them:
        # ones(B) multiplies the loss by B, and a zero does not drop its unroll.
        if sample_weight is not None:
            raise ValueError(
                "ImpalaLoss does not take `sample_weight` (nor `class_weight`): "
                "its loss is already reduced over the valid steps of the whole "
                "batch. To leave steps or whole unrolls out, pass "
                "`pack_targets(mask=...)` (False drops a step); to weigh the "
                "loss, scale `baseline_cost`/`entropy_cost` or the learning rate.")
        return super().__call__(y_true, y_pred)

    @_checks.enforced
    def call(self, y_true, y_pred):
        # The loss alone: its compiled call skips the diagnostics' work.
        costs = self._costs(cross_replica=True)
        loss = _packed_loss(y_true, y_pred, self.action_sizes, self._vtrace, costs)
        if loss is None:
            loss = impala._loss_without_diagnostics(
                self._unpack(y_true, y_pred), self._vtrace, costs)
        return _reported_as_global_mean(loss)

    def get_config(self):
        config = self._costs(cross_replica=True)._asdict()
        del config["cross_replica"]  # Not an option of the Keras loss.
        config.update(
            self._vtrace_config(), name=self.name, reduction=self.impala_reduction,
            action_sizes=self.action_sizes,
            dist_class=None if self.dist_class is None else
            keras.saving.serialize_keras_object(self.dist_class))
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**{k: v for k, v in config.items() if k != "dtype"})


# The diagnostics that are reduced loss terms (shares of the batch's under a
# strategy); the others are masked means over the valid steps.
_LOSS_TERMS = tuple(d for d in impala.DIAGNOSTICS if d.endswith("_loss"))


@_register
class ImpalaMetric(keras.metrics.Mean):
    """One diagnostic of `ImpalaLoss` as a Keras metric (its mean over batches).

    Pass the loss the model is compiled with; the metric recomputes the
    diagnostics from (y_true, y_pred) on the local batch. `impala_metrics`
    builds all of them. Under a `tf.distribute` strategy each replica adds
    the whole batch's value (loss terms summed over the replicas, statistics
    weighed by their valid steps) with weight 1 / N, so the metric is the one
    device's even for a batch split unequally (docs/tutorials/keras.md).
    (``ess_fraction`` is then the replicas' fractions weighed by their valid
    steps, not the fraction of the whole batch.)

    Args:
      diagnostic: A key of `tf_vtrace.impala.DIAGNOSTICS`, e.g. ``"mean_rho"``.
      loss: The `ImpalaLoss` whose options to use (or its config dict).
      name: The metric name; default `diagnostic`.
      dtype: The metric dtype.
    """

    def __init__(self, diagnostic, loss, name=None, dtype=None):
        _checks.check_choice(diagnostic, "diagnostic", impala.DIAGNOSTICS)
        super().__init__(name=name or diagnostic, dtype=dtype)
        if isinstance(loss, dict):
            loss = ImpalaLoss.from_config(loss)
        if not isinstance(loss, ImpalaLoss):
            raise TypeError(f"`loss` must be an ImpalaLoss, got {type(loss).__name__}.")
        self.diagnostic = diagnostic
        self.impala_loss = loss

    def update_state(self, y_true, y_pred, sample_weight=None):
        del sample_weight  # Already a mean over valid steps.
        y_true = tf.convert_to_tensor(y_true, tf.float32)
        y_pred = tf.cast(tf.convert_to_tensor(y_pred), tf.float32)
        _, diagnostics = self.impala_loss.loss_and_diagnostics(y_true, y_pred)
        value, replicas = diagnostics[self.diagnostic], _replicas_in_sync()
        if replicas == 1:
            return super().update_state(value)
        if self.diagnostic in _LOSS_TERMS:  # a replica's share of the batch's
            value = impala._global_sum(value, True)
        else:  # a masked mean over the replica's valid steps
            valid = tf.reduce_sum(tf.cast(tf.not_equal(
                y_true[..., TARGET_COLUMNS.index("mask")], 0.), value.dtype))
            value = tf.math.divide_no_nan(impala._global_sum(value * valid, True),
                                          impala._global_sum(valid, True))
        # Keras sums the replicas' totals and weights on reading: N adds of
        # weight 1 / N count as the one device's single add of this batch.
        return super().update_state(value, sample_weight=1. / replicas)

    def get_config(self):
        return {"diagnostic": self.diagnostic, "name": self.name,
                "loss": self.impala_loss.get_config()}


def impala_metrics(loss, diagnostics=impala.DIAGNOSTICS):
    """`ImpalaMetric`s for `model.compile(metrics=...)`, one per diagnostic.

    Args:
      loss: The `ImpalaLoss` the model is compiled with.
      diagnostics: Which diagnostics; default all of
        `tf_vtrace.impala.DIAGNOSTICS`.

    Returns:
      A list of metrics.
    """
    if isinstance(diagnostics, str):  # Iterated, it would give its letters.
        raise TypeError(f"`diagnostics` must be a list of names, got the string "
                        f"{diagnostics!r}: pass [{diagnostics!r}].")
    return [ImpalaMetric(d, loss) for d in diagnostics]


def _check_values_cover_t_plus_1(values, rewards, time_major):
    axis = 0 if time_major else 1
    observations = tf.convert_to_tensor(values).shape[axis]
    steps = tf.convert_to_tensor(rewards).shape[axis]
    if observations is not None and steps is not None and observations != steps + 1:
        raise ValueError(
            f"`values` covers {observations} observations but `rewards` has "
            f"{steps} steps: without `bootstrap_value`, `values` must have "
            f"T + 1 = {steps + 1} (the last one bootstraps).")


@_register
class VTrace(_VTraceOptionsOwner, keras.layers.Layer):
    r"""V-trace targets as a Keras layer, for functional models and `train_step`.

    Calls `tf_vtrace.impala.vtrace_targets` (the core's recursion with padding
    and truncation); batch-major by default. Without `bootstrap_value`,
    `values` covers T + 1 observations and its last step bootstraps.

    Args:
      clip_rho_threshold: ρ̄, a positive float or None.
      clip_pg_rho_threshold: ρ̄_pg, a positive float or None.
      clip_c_threshold: c̄, a positive float or None.
      lambda_: λ, a float.
      pg_target: ``"vs"`` or ``"lambda_returns"``.
      alpha_: Leaky V-trace's α in [0, 1], a float (1: V-trace).
      time_major: False (Keras layout, [B, T, ...]) or True.
      jit_compile: Compile the recursion with XLA.
      **kwargs: Layer arguments (``name``, ``dtype``).

    Examples:
      >>> import tensorflow as tf
      >>> from tf_vtrace.keras import VTrace
      >>> B, T, A = 2, 3, 4
      >>> out = VTrace()(
      ...     behaviour_policy_logits=tf.zeros([B, T, A]),
      ...     target_policy_logits=tf.zeros([B, T, A]),
      ...     actions=tf.zeros([B, T], tf.int32), discounts=tf.ones([B, T]),
      ...     rewards=tf.ones([B, T]), values=tf.zeros([B, T + 1]))
      >>> vs = out["vs"]
      >>> tuple(float(v) for v in vs[0])
      (3.0, 2.0, 1.0)
    """

    def __init__(self, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0,
                 clip_c_threshold=1.0, lambda_=1.0, pg_target="vs",
                 time_major=False, jit_compile=True, alpha_=1.0, **kwargs):
        # Under a mixed_float16/bfloat16 policy Keras would cast the float32
        # rewards and discounts to half before `call`: the recursion sums T
        # terms, which half precision cannot hold (1e-2 relative error at
        # T = 100). Inputs keep their dtype; half ones are computed in float32.
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self._store_vtrace_options(_options.VTraceOptions(
            # The hyperparameters in `_options.VTRACE_HYPERPARAMETERS` order.
            pg_target, clip_rho_threshold, clip_pg_rho_threshold,
            clip_c_threshold, lambda_, alpha_,
            time_major=time_major, jit_compile=jit_compile))

    @property
    def time_major(self):
        """Whether the sequences are [T, B, ...] (else [B, T, ...])."""
        return self._vtrace.time_major

    def call(self, behaviour_policy_logits, target_policy_logits, actions,
             discounts, rewards, values, bootstrap_value=None, mask=None,
             truncated=None, truncation_values=None):
        """Returns a dict: ``vs``, ``pg_advantages`` (no gradient), ``log_rhos``."""
        if bootstrap_value is None:
            _check_values_cover_t_plus_1(values, rewards, self.time_major)
            if self.time_major:
                values, bootstrap_value = values[:-1], values[-1]
            else:
                values, bootstrap_value = values[:, :-1], values[:, -1]
        targets = impala.vtrace_targets(
            behaviour_policy_logits, target_policy_logits, actions, discounts,
            rewards, values, bootstrap_value, mask=mask, truncated=truncated,
            truncation_values=truncation_values, **self._vtrace._asdict())
        return {"vs": targets.vs, "pg_advantages": targets.pg_advantages,
                "log_rhos": targets.log_rhos}

    def get_config(self):
        config = super().get_config()
        config.update(self._vtrace_config(), time_major=self.time_major)
        return config


@_register
class GaussianParams(keras.layers.Layer):
    r"""A diagonal Gaussian's parameters as `ImpalaLoss`' packed heads.

    Maps a mean [..., D] (and, if given, a state-dependent log-std [..., D])
    to [..., 2·D]: per dimension d the mean, then the log-std, the layout of
    `tf_vtrace.distributions` (D heads of 2 for
    ``ImpalaLoss(action_sizes=[2] * D, dist_class=tf_vtrace.distributions.normal)``).
    Without a log-std input the layer's own weight ``log_std`` [D], learned
    and the same in every state (as in PPO's and CleanRL's continuous
    policies), is broadcast over the batch.

    Args:
      initial_log_std: The initial value of the learned log-std.
      **kwargs: Layer arguments (``name``, ``dtype``).

    Examples:
      >>> import numpy as np
      >>> from tf_vtrace.keras import GaussianParams
      >>> params = GaussianParams(initial_log_std=-0.5)(np.ones([2, 3], "float32"))
      >>> params.numpy()[0].tolist()  # m_0, log σ_0, m_1, log σ_1, ...
      [1.0, -0.5, 1.0, -0.5, 1.0, -0.5]
    """

    def __init__(self, initial_log_std=0.0, **kwargs):
        super().__init__(**kwargs)
        self.initial_log_std = float(initial_log_std)
        self.log_std = None

    def build(self, mean_shape, log_std_shape=None):
        if log_std_shape is None:
            self.log_std = self.add_weight(
                name="log_std", shape=(mean_shape[-1],),
                initializer=keras.initializers.Constant(self.initial_log_std))
        self.built = True

    def call(self, mean, log_std=None):
        """[..., 2·D] from `mean` [..., D] and `log_std` [..., D] or None."""
        if log_std is None:
            if self.log_std is None:
                raise ValueError(
                    "GaussianParams was built with a log-std input; call it "
                    "with `log_std` every time, or use another layer.")
            log_std = self.log_std
        return distributions.gaussian_params(mean, log_std)

    def compute_output_shape(self, mean_shape, log_std_shape=None):
        width = mean_shape[-1]
        return tuple(mean_shape[:-1]) + (None if width is None else 2 * width,)

    def get_config(self):
        config = super().get_config()
        config.update(initial_log_std=self.initial_log_std)
        return config
