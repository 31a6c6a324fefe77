r"""V-trace targets and the IMPALA loss as an exportable SavedModel module.

`VTraceModule` is a `tf.Module` with two `tf.function`s whose input signatures
leave the time, batch and action dims unknown (None), so one SavedModel serves
any unroll length, batch size and number of actions:

* ``vtrace_targets``: vs, the policy-gradient advantages and log ρ;
* ``loss``: the IMPALA loss and its diagnostics (`tf_vtrace.impala.impala_loss`).

Inputs are time-major [T, B] like the core's functions, for one Categorical
action head; the options (clipping thresholds, λ, costs, reduction,
`pg_target`) are fixed when the module is built and saved with it.
`tf.saved_model.load` gives back both functions, in another process too,
without tf_vtrace installed.

`export_policy` writes a trained policy network (a Keras model observations →
(logits, value)) as a SavedModel whose ``act`` function maps a batch of
observations to logits, value, the greedy and a sampled action per head; or,
with ``distribution="gaussian"``, from a diagonal Gaussian whose (mean,
log-std) pairs are the policy output (`tf_vtrace.distributions`' layout):
greedy is the mean.
"""

import json

import tensorflow as tf

from tf_vtrace import _checks, _options, impala

__all__ = ["DISTRIBUTIONS", "VTraceModule", "export_policy", "policy_module",
           "split_heads"]

# How `export_policy` reads the policy output.
DISTRIBUTIONS = ("categorical", "gaussian")


def _spec(shape, name, dtype=tf.float32):
    return tf.TensorSpec(shape, dtype, name=name)


_SEQUENCE = [None, None]          # [T, B]
_LOGITS = [None, None, None]      # [T, B, A]
_TARGET_SPECS = [
    _spec(_LOGITS, "behaviour_policy_logits"),
    _spec(_LOGITS, "target_policy_logits"),
    _spec(_SEQUENCE, "actions", tf.int32),
    _spec(_SEQUENCE, "discounts"),
    _spec(_SEQUENCE, "rewards"),
    _spec(_SEQUENCE, "values"),
    _spec([None], "bootstrap_value"),
    _spec(_SEQUENCE, "mask"),
    _spec(_SEQUENCE, "truncated"),
    _spec(_SEQUENCE, "truncation_values"),
]


class VTraceModule(tf.Module):
    r"""An exportable module computing V-trace targets and the IMPALA loss.

    Both functions take the same float32 time-major inputs (actions int32):
    behaviour and target logits [T, B, A], actions, discounts, rewards, values
    [T, B], bootstrap_value [B], and mask, truncated, truncation_values
    [T, B] (pass ones, zeros, zeros for complete unrolls; see
    `tf_vtrace.impala.vtrace_targets` for their meaning).

    Args:
      baseline_cost: Weight of ½ (vs − V)².
      entropy_cost: Weight of the entropy bonus.
      kl_cost: Weight of KL(μ ‖ π).
      reduction: ``"sum"``, ``"mean"`` or ``"masked_mean"``.
      pg_target: ``"vs"`` or ``"lambda_returns"``.
      clip_rho_threshold: ρ̄, a positive float or None.
      clip_pg_rho_threshold: ρ̄_pg, a positive float or None.
      clip_c_threshold: c̄, a positive float or None.
      lambda_: λ, a float.
      jit_compile: Compile the recursion with XLA (saved with the function).
      alpha_: Leaky V-trace's α in [0, 1], a float (1: V-trace).
      name: The module name.

    Examples:
      >>> import tensorflow as tf
      >>> from tf_vtrace.export import VTraceModule
      >>> module = VTraceModule()
      >>> T, B, A = 3, 2, 4
      >>> out = module.vtrace_targets(
      ...     tf.zeros([T, B, A]), tf.zeros([T, B, A]), tf.zeros([T, B], tf.int32),
      ...     tf.ones([T, B]), tf.ones([T, B]), tf.zeros([T, B]), tf.zeros([B]),
      ...     tf.ones([T, B]), tf.zeros([T, B]), tf.zeros([T, B]))
      >>> vs = out["vs"]
      >>> tuple(float(v) for v in vs[:, 0])
      (3.0, 2.0, 1.0)
    """

    def __init__(self, baseline_cost=0.5, entropy_cost=0.00025, kl_cost=0.0,
                 reduction="sum", pg_target="vs", clip_rho_threshold=1.0,
                 clip_pg_rho_threshold=1.0, clip_c_threshold=1.0, lambda_=1.0,
                 jit_compile=True, name=None, alpha_=1.0):
        super().__init__(name=name)
        _checks.check_choice(reduction, "reduction", impala.REDUCTIONS)
        _checks.check_choice(pg_target, "pg_target", impala.PG_TARGETS)
        self._vtrace_options = _options.VTraceOptions(
            # The hyperparameters in `_options.VTRACE_HYPERPARAMETERS` order.
            pg_target, clip_rho_threshold, clip_pg_rho_threshold,
            clip_c_threshold, lambda_, alpha_, jit_compile=jit_compile)
        _checks.check_hyperparameters(self._vtrace_options)
        self._costs = _options.LossCosts(
            baseline_cost=baseline_cost, entropy_cost=entropy_cost,
            kl_cost=kl_cost, reduction=reduction,
            # A SavedModel is called outside any distribution strategy.
            cross_replica=False)

    @tf.function(input_signature=_TARGET_SPECS)
    def vtrace_targets(self, behaviour_policy_logits, target_policy_logits,
                       actions, discounts, rewards, values, bootstrap_value,
                       mask, truncated, truncation_values):
        """Returns a dict: ``vs``, ``pg_advantages``, ``log_rhos`` [T, B]."""
        inputs = _options.LossInputs(
            behaviour_policy_logits, target_policy_logits, actions, discounts,
            rewards, values, bootstrap_value, mask, truncated, truncation_values)
        targets = impala.vtrace_targets(
            **inputs._asdict(), **self._vtrace_options._asdict())
        return {"vs": targets.vs, "pg_advantages": targets.pg_advantages,
                "log_rhos": targets.log_rhos}

    @tf.function(input_signature=_TARGET_SPECS)
    def loss(self, behaviour_policy_logits, target_policy_logits, actions,
             discounts, rewards, values, bootstrap_value, mask, truncated,
             truncation_values):
        """Returns a dict: ``loss`` and the diagnostics of `impala_loss`."""
        inputs = _options.LossInputs(
            behaviour_policy_logits, target_policy_logits, actions, discounts,
            rewards, values, bootstrap_value, mask, truncated, truncation_values)
        loss, diagnostics = impala.impala_loss(
            **inputs._asdict(), **self._vtrace_options._asdict(),
            **self._costs._asdict())
        return dict(diagnostics, loss=loss)

    def signatures(self):
        """The serving signatures for `tf.saved_model.save(..., signatures=)`.

        Returns:
          A dict with the concrete functions ``vtrace_targets`` and ``loss``.
        """
        return {"vtrace_targets": self.vtrace_targets.get_concrete_function(),
                "loss": self.loss.get_concrete_function()}


# --- The trained policy --------------------------------------------------------


def split_heads(logits, head_sizes):
    """[..., Σ A_h] logits → a list of [..., A_h], one per action head.

    Args:
      logits: Concatenated logits, a tensor or a numpy array.
      head_sizes: Actions per head, e.g. ``(2, 3)``.

    Returns:
      A list with one slice of `logits` per head.

    Examples:
      >>> import numpy as np
      >>> [h.shape for h in split_heads(np.zeros([4, 5]), (2, 3))]
      [(4, 2), (4, 3)]
    """
    bounds = [0]
    for size in head_sizes:
        bounds.append(bounds[-1] + int(size))
    return [logits[..., lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


class _PolicyModule(tf.Module):
    """What `export_policy` saves: the model, its head layout, metadata."""

    def __init__(self, model, head_sizes, metadata, distribution="categorical"):
        super().__init__(name="policy")
        self.model = model
        self.head_sizes = tf.Variable(head_sizes, trainable=False,
                                      dtype=tf.int32, name="head_sizes")
        self.action_distribution = tf.Variable(
            distribution, trainable=False, name="action_distribution")
        self._gaussian = distribution == "gaussian"
        self.metadata = tf.Variable(json.dumps(metadata), trainable=False,
                                    name="metadata")
        self._head_sizes = tuple(head_sizes)
        # A recurrent model (`tf_vtrace.agent._recurrent`) takes
        # [observations, core_state]: act takes and returns the state too.
        self._recurrent = isinstance(model.input, (list, tuple))
        inputs = model.input if self._recurrent else [model.input]
        specs = [tf.TensorSpec([None] + list(x.shape[1:]), tf.float32,
                               name=name)
                 for x, name in zip(inputs, ("observations", "core_state"))]
        if self._recurrent:
            self.core_state_shape = tf.Variable(
                specs[1].shape[1:], trainable=False, dtype=tf.int32,
                name="core_state_shape")
        self.act = tf.function(self._act, input_signature=specs)

    def _act(self, observations, core_state=None):
        extra = {}
        if self._recurrent:
            logits, value, extra["core_state"] = self.model(
                [observations, core_state], training=False)
        else:
            logits, value = self.model(observations, training=False)
        if self._gaussian:  # (mean, log-std) pairs
            mean, log_std = logits[..., 0::2], logits[..., 1::2]
            return dict(extra, logits=logits, value=value, greedy_action=mean,
                        sampled_action=mean + tf.exp(log_std) * tf.random.normal(
                            tf.shape(mean)))
        heads = split_heads(logits, self._head_sizes)
        greedy = [tf.argmax(h, axis=-1, output_type=tf.int32) for h in heads]
        sampled = [tf.random.categorical(h, 1, dtype=tf.int32)[:, 0]
                   for h in heads]
        return dict(extra, logits=logits, value=value,
                    greedy_action=tf.stack(greedy, axis=-1),
                    sampled_action=tf.stack(sampled, axis=-1))


def policy_module(model, head_sizes=None, metadata=None,
                  distribution="categorical"):
    """The `tf.Module` that `export_policy` saves, not saved: its ``act`` is
    the exported one, so a policy can be evaluated in process (as the agent
    does during training) exactly as it will act once exported.

    Args and the ``act`` function: as `export_policy`.

    Returns:
      A `tf.Module` with ``act`` (a `tf.function`), ``head_sizes``,
      ``metadata`` and, for a recurrent model, ``core_state_shape``.

    Raises:
      TypeError: `model` is not a Keras model with known inputs and
        outputs, or `metadata` is not JSON-serializable.
      ValueError: The model's outputs are not (logits, value[, core_state]),
        or `head_sizes` are not positive or do not sum to its logits, or
        `distribution` is not one of `DISTRIBUTIONS` (a Gaussian's: an even
        number of outputs, no `head_sizes`).
    """
    num_logits = _check_policy_model(model)
    _checks.check_choice(distribution, "distribution", DISTRIBUTIONS)
    if distribution == "gaussian" and (head_sizes is not None or num_logits % 2):
        raise ValueError(
            "distribution='gaussian' takes no `head_sizes` and a model with "
            f"an even number of policy outputs (mean, log-std pairs); got "
            f"head_sizes={head_sizes} and {num_logits} outputs.")
    head_sizes = (num_logits,) if head_sizes is None else tuple(head_sizes)
    sizes = _checks.positive_ints(head_sizes)
    if sizes is None or sum(sizes) != num_logits:
        raise ValueError(f"`head_sizes` {head_sizes} must be integers >= 1 "
                         f"that sum to the model's {num_logits} logits.")
    metadata = {} if metadata is None else metadata
    try:
        json.dumps(metadata)
    except (TypeError, ValueError) as error:
        raise TypeError(f"`metadata` must be JSON-serializable: {error}.") from None
    return _PolicyModule(model, tuple(sizes), metadata, distribution)


def _check_policy_model(model):
    """The model's number of logits, after checking its outputs' layout."""
    outputs, inputs = getattr(model, "outputs", None), getattr(model, "inputs", None)
    if not outputs or not inputs:
        raise TypeError(
            "`model` must be a Keras model with known inputs and outputs (a "
            "functional or Sequential model, built from `keras.Input`); got "
            f"{type(model).__name__}, which has none: a subclassed model can be "
            "wrapped as keras.Model(x, model(x)) with x = keras.Input(shape).")
    recurrent = len(inputs) == 2
    expected = 3 if recurrent else 2
    shapes = [tuple(output.shape) for output in outputs]
    if (len(outputs) != expected or len(shapes[0]) != 2 or shapes[0][-1] is None
            or len(shapes[1]) != 1):
        layout = ("[logits [N, Σ A_h], value [N], core_state]" if recurrent
                  else "[logits [N, Σ A_h], value [N]]")
        raise ValueError(
            f"`model` must output {layout}; its outputs have shapes {shapes} "
            "(a value of shape [N, 1] needs keras.layers.Reshape(()) at the end).")
    return int(shapes[0][-1])


def export_policy(model, path, head_sizes=None, metadata=None,
                  distribution="categorical"):
    """Writes a trained policy as a SavedModel with one ``act`` signature.

    ``act(observations)`` takes float32 observations [N, ...] (N is None: any
    batch) and returns a dict: ``logits`` [N, Σ A_h], ``value`` [N],
    ``greedy_action`` and ``sampled_action`` [N, H] int32 (one column per
    head; the sample draws from Categorical(logits) of each head). It is also
    the ``serving_default`` signature. Reload with `tf.saved_model.load(path)`
    (tf_vtrace not needed); the loaded object has ``act``, ``head_sizes`` and
    ``metadata`` (a JSON string variable).

    A recurrent model (inputs ``[observations, core_state]``, outputs
    ``[logits, value, core_state']``, `tf_vtrace.agent.networks.lstm`) gives
    ``act(observations, core_state)``, which also returns ``core_state``
    (after this step); the loaded object has ``core_state_shape`` (one
    env's, e.g. [2, S]). Start each episode from zeros of that shape and
    feed back the returned state.

    With ``distribution="gaussian"`` the policy output [N, 2·D] is a
    diagonal Gaussian's (mean, log-std) pairs (`tf_vtrace.distributions`):
    ``greedy_action`` [N, D] float32 is the mean, ``sampled_action`` a draw,
    neither clipped to the action space's bounds (clip them on the way to
    the env). The loaded object's ``action_distribution`` says which.

    Args:
      model: A Keras model mapping observations [N, ...] to
        ``(logits [N, Σ A_h], value [N])``, like `tf_vtrace.agent`'s networks.
      path: The SavedModel directory to write.
      head_sizes: Actions per head; None: one head with every logit.
      metadata: A JSON-serializable dict saved with the policy (e.g. the env
        id it was trained on); None: an empty dict.
      distribution: ``"categorical"`` (heads of logits) or ``"gaussian"``.

    Returns:
      `path`, as a string.

    Examples:
      >>> import keras, numpy as np, tensorflow as tf, tempfile, os
      >>> from tf_vtrace.export import export_policy
      >>> x = keras.Input((4,))
      >>> model = keras.Model(x, [keras.layers.Dense(2)(x),
      ...                         keras.layers.Reshape(())(keras.layers.Dense(1)(x))])
      >>> path = export_policy(model, os.path.join(tempfile.mkdtemp(), "policy"),
      ...                      metadata={"env_id": "CartPole-v1"})
      >>> policy = tf.saved_model.load(path)
      >>> out = policy.act(np.zeros([3, 4], np.float32))
      >>> out["greedy_action"].shape, out["value"].shape
      (TensorShape([3, 1]), TensorShape([3]))
    """
    module = policy_module(model, head_sizes, metadata, distribution)
    tf.saved_model.save(module, str(path),
                        signatures={"serving_default": module.act})
    return str(path)
