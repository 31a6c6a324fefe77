r"""An IMPALA agent for TF-Agents: `ImpalaAgent`, a `tf_agents.agents.TFAgent`.

TF-Agents is optional: `import tf_vtrace` never imports it, and importing this
module without it raises an `ImportError` that says what to install. It needs
Keras 2 (the `tf_keras` package): set ``TF_USE_LEGACY_KERAS=1`` before the
first `import tensorflow` of the process; `ImpalaAgent` refuses to be built
under Keras 3, where TF-Agents 0.19's `policy.variables()` is empty and
checkpoints silently drop the network layers.

The agent's collect policy samples from the actor network's distribution and
records its parameters in ``policy_info["behaviour_logits"]``, so that
V-trace corrects for the policy that really acted (μ), however far the
learner (π) has moved since:

* discrete action specs (a nest of bounded integer specs, one Categorical
  head each): the logits of each head, ``[..., n]``;
* a continuous action spec (one bounded float spec of shape (D,)): the
  actor network outputs a diagonal Gaussian, e.g. `ActorDistributionNetwork`'s
  default `NormalProjectionNetwork` (unsquashed, ``scale_distribution=False``),
  and the record is its mean and log standard deviation per dimension,
  ``[..., 2·D]`` in the layout of `tf_vtrace.distributions`; log ρ is the
  joint log-ratio, summed over the dimensions. The collect policy does not
  clip its actions (the loss needs the action the Gaussian drew; TF-Agents'
  PPO policies do not clip either): clip the copy the environment gets,
  e.g. with `tf_agents.environments.wrappers.ActionClipWrapper`.

`train` takes batch-major trajectories ``[B, T + 1, ...]`` of any length, e.g. windows of
``replay_buffer.as_dataset(num_steps=T + 1)``:

* row t holds x_t, a_t, μ's logits at x_t, and the reward and discount of the
  transition x_t → x_{t+1} (TF-Agents stores those of the next time step in
  the row): rows 0 … T − 1 are the V-trace steps, and the T + 1 observations
  give V(x_0) … V(x_{T−1}) and the bootstrap V(x_T);
* a boundary row (``is_boundary()``: the last step of an episode, whose
  "transition" leads to the first step of the next one) is masked with
  ``mask = ~is_boundary()``: it enters neither the recursion nor the loss, and
  it cuts the trace, so nothing leaks between episodes;
* the row before a boundary bootstraps from V(x_final), the value of its
  episode's final observation (the boundary row's observation), scaled by
  ``discount_factor · discount``. TF-Agents' discount tells termination from
  truncation: it is 0 when the episode terminated (no bootstrap) and stays 1
  when a `tf_agents.environments.wrappers.TimeLimit` cut it (bootstrap from
  V(x_final)). So truncated episodes need no `truncated` argument here.
  Beware gym 0.23's own `TimeLimit`, which `suite_gym.load` keeps: its step
  limit reaches TF-Agents as a termination (discount 0). Strip it
  (``suite_gym.wrap_env(gym.make(name).unwrapped, max_episode_steps=N)``) or
  pass a `max_episode_steps` below gym's limit.

Recurrent actor and value networks (e.g. `ActorDistributionRnnNetwork`,
`ValueRnnNetwork`, either or both) are supported. The collect policy's state
is a dict with an entry per recurrent network (``"actor_network"``,
``"value_network"``), and it records the state each step *started from* in
``policy_info["policy_state"]``. `train` replays each window from the state
of its row 0 with the window's step types, so the networks reset their state
where an episode starts (step_type FIRST) exactly as they did while acting:
with the weights that collected the data, π equals μ at every step.
"""

import collections
import collections.abc

import tensorflow as tf
import tensorflow_probability as tfp

from tf_vtrace import _checks, _options, distributions, impala

_INSTALL_HELP = (
    "tf_vtrace.tf_agents needs TF-Agents 0.19, which cannot be imported here "
    "({error}). TF-Agents 0.19's declared pins conflict with TensorFlow 2.21, "
    "so install it without its dependencies and add the ones it really "
    "needs:\n"
    "    pip install --no-deps tf-agents==0.19.0\n"
    "    pip install gin-config pillow tensorboard gym==0.23.0 'pygame>=2.1.3' "
    "'numpy<2.4'\n"
    "(the second line is `pip install 'tf-vtrace[tf-agents]'`). numpy 2.4 "
    "breaks TF-Agents' ActorDistributionNetwork. Then set "
    "TF_USE_LEGACY_KERAS=1 before TensorFlow is imported "
    "(e.g. `TF_USE_LEGACY_KERAS=1 python train.py`): TF-Agents needs Keras 2 "
    "(tf_keras).")

try:
    from tf_agents.agents import data_converter, tf_agent
    from tf_agents.networks import network as tfa_network
    from tf_agents.policies import greedy_policy, tf_policy
    from tf_agents.specs import tensor_spec
    from tf_agents.trajectories import policy_step
    from tf_agents.utils import eager_utils
except ImportError as error:  # tf_agents or one of its real needs (gym, gin)
    raise ImportError(_INSTALL_HELP.format(error=error)) from error

tfd = tfp.distributions

__all__ = ["BEHAVIOUR_LOGITS", "POLICY_STATE", "ImpalaLossInfo", "ImpalaPolicy",
           "ImpalaAgent"]

BEHAVIOUR_LOGITS = "behaviour_logits"
POLICY_STATE = "policy_state"

_LOSS_TERMS = ("policy_loss", "baseline_loss", "entropy_loss", "kl_loss",
               "regularization_loss")
_STATISTICS = tuple(name for name in impala.DIAGNOSTICS if name not in _LOSS_TERMS)


class ImpalaLossInfo(collections.namedtuple(
        "ImpalaLossInfo", _LOSS_TERMS + _STATISTICS)):
    """The diagnostics of one `ImpalaAgent` loss, in `LossInfo.extra`.

    The five terms sum to `LossInfo.loss`; the statistics are masked means
    over the valid (non-boundary) steps of the batch.

    Attributes:
      policy_loss: −log π(a_t|x_t) · A_t, reduced.
      baseline_loss: baseline_cost · ½ (vs_t − V(x_t))², reduced.
      entropy_loss: −entropy_cost · H(π(·|x_t)), reduced (negative).
      kl_loss: kl_cost · KL(μ(·|x_t) ‖ π(·|x_t)), reduced.
      regularization_loss: The networks' regularization losses (e.g. kernel
        regularizers), 0 without any.
      mean_rho: The mean unclipped importance ratio ρ_t = π(a_t)/μ(a_t).
      rho_clipped_fraction: The fraction of steps with ρ_t > ρ̄.
      c_clipped_fraction: The fraction of steps with ρ_t > c̄.
      ess_fraction: ESS / N = (Σρ_t)² / (N Σρ_t²) over the N valid steps.
      entropy: The mean entropy H(π(·|x_t)).
      kl: The mean KL(μ(·|x_t) ‖ π(·|x_t)).
    """

    __slots__ = ()


def _require_legacy_keras():
    """Refuses Keras 3, under which TF-Agents 0.19 silently loses weights."""
    if not _checks.legacy_keras_active():
        raise RuntimeError(
            "ImpalaAgent needs Keras 2 (tf_keras), but tf.keras is Keras 3. "
            "Set TF_USE_LEGACY_KERAS=1 before "
            "TensorFlow is first imported in this process (e.g. "
            "`TF_USE_LEGACY_KERAS=1 python train.py`, or "
            "`os.environ['TF_USE_LEGACY_KERAS'] = '1'` above every import). "
            "Under Keras 3, TF-Agents 0.19 trains but policy.variables() is "
            "empty and checkpoints silently drop the network layers.")


def _is_continuous(action_spec):
    """Checks the spec: a nest of bounded integer specs with minimum 0 and one
    maximum per head (Categorical logits), or one bounded float spec of
    shape (D,) (a diagonal Gaussian). Returns whether it is the latter."""
    specs = tf.nest.flatten(action_spec)
    if len(specs) == 1 and specs[0].dtype.is_floating:
        spec = specs[0]
        if not tensor_spec.is_bounded(spec) or spec.shape.rank != 1:
            raise ValueError(
                "A continuous `action_spec` must be one bounded float spec of "
                f"shape (D,) (a diagonal Gaussian); got {spec}.")
        return True
    for spec in specs:
        if not (tensor_spec.is_bounded(spec) and tensor_spec.is_discrete(spec)):
            raise ValueError(
                "`action_spec` must be a nest of bounded integer (discrete) "
                "specs, one per action head, or one bounded float spec of "
                f"shape (D,); got {spec}.")
        minimum, maximum = spec.minimum, spec.maximum
        if (minimum != 0).any() or (maximum != maximum.flat[0]).any():
            raise ValueError(
                "Each head of `action_spec` must have minimum 0 and the same "
                f"maximum in every dimension (Categorical logits); got {spec}.")
    return False


def _params_spec(spec):
    """TensorSpec float32 of μ's recorded parameters for one action spec:
    [*shape, n] logits, or [2·D] Gaussian parameters."""
    width = (spec.shape.concatenate([int(spec.maximum.flat[0]) + 1])
             if spec.dtype.is_integer else [2 * spec.shape[0]])
    return tf.TensorSpec(width, tf.float32, name=BEHAVIOUR_LOGITS)


def _check_network(network, name, observation_spec):
    if not isinstance(network, tfa_network.Network):
        raise TypeError(f"`{name}` must be a tf_agents.networks.Network, got "
                        f"{type(network).__name__}.")
    if network.input_tensor_spec is None:
        network.create_variables(observation_spec)
    else:
        network.create_variables()


def _recurrent(networks):
    """The networks of a {name: network} dict that carry a state."""
    return {name: network for name, network in networks.items()
            if network is not None and tf.nest.flatten(network.state_spec)}


def _lists_as_tuples(nest):
    """`nest` with its lists as tuples: a replay buffer's `as_dataset`
    refuses specs with lists, and an LSTM's state spec is a list [h, c]."""
    if isinstance(nest, collections.abc.Mapping):
        return {key: _lists_as_tuples(value) for key, value in nest.items()}
    if isinstance(nest, list):
        return tuple(_lists_as_tuples(value) for value in nest)
    return nest


def _apply(network, name, observation, step_type, state, training):
    """`network` run from ``state[name]`` (``()``: feed-forward).

    TF-Agents' recurrent networks reset their state to zeros at the steps
    whose step_type is FIRST, so a state that crosses an episode start is
    harmless; on ``[B, T, ...]`` inputs they unroll over T.
    """
    return network(observation, step_type=step_type,
                   network_state=state.get(name, ()), training=training)


_GAUSSIANS = (tfd.MultivariateNormalDiag, tfd.Normal, tfd.Independent)


def _params_of(output):
    """A head's parameters: a Categorical's logits, a diagonal Gaussian's
    (mean, log-std) pairs, or the output itself (logits)."""
    if isinstance(output, tfd.Categorical):
        return output.logits_parameter()
    if isinstance(output, _GAUSSIANS):
        return distributions.gaussian_params(output.mean(),
                                             tf.math.log(output.stddev()))
    if isinstance(output, tfd.Distribution):
        raise TypeError(
            "The actor network must output Categorical distributions or "
            "logits per discrete head, or an unsquashed diagonal Gaussian "
            f"(MultivariateNormalDiag) for a continuous spec; got a "
            f"{type(output).__name__} (a NormalProjectionNetwork with "
            "scale_distribution=True squashes: its log-prob is infinite at "
            "the bounds).")
    return tf.convert_to_tensor(output)


def _actor_params(actor_network, observation, step_type, state, training):
    """The actor's parameters per action head (a nest; `_params_of`) and its
    next state (``state`` as in `_apply`)."""
    output, next_state = _apply(actor_network, "actor_network", observation,
                                step_type, state, training)
    return tf.nest.map_structure(_params_of, output), next_state


def _scalar_heads(nest, action_spec):
    """One [B, T, ...] tensor per scalar action, from a nest like the spec.

    A head of shape S holds prod(S) independent Categorical actions: their
    log-probabilities, entropies and KLs add up, which is what `impala_loss`
    does with a list of heads. Splits [B, T, *S, ...] into prod(S) tensors
    [B, T, ...] (the logits keep their last axis, n). A continuous spec is
    one head: its [B, T, D] actions and [B, T, 2·D] parameters as they are.
    """
    scalar_heads = []
    for tensor, spec in zip(tf.nest.flatten(nest), tf.nest.flatten(action_spec)):
        if spec.shape.rank == 0 or spec.dtype.is_floating:
            scalar_heads.append(tensor)
            continue
        size = spec.shape.num_elements()
        trailing = tensor.shape[2 + spec.shape.rank:].as_list()
        flat = tf.reshape(tensor, tf.concat(
            [tf.shape(tensor)[:2], [size] + trailing], axis=0))
        scalar_heads.extend(tf.unstack(flat, num=size, axis=2))
    return scalar_heads


def _head_distribution(params, spec):
    if spec.dtype.is_floating:
        return distributions.diagonal_gaussian(params)
    return tfd.Categorical(logits=params, dtype=spec.dtype)


class ImpalaPolicy(tf_policy.TFPolicy):
    """Samples each action head from the actor network's distribution.

    Discrete heads: Categorical(logits); a continuous spec: the unsquashed
    diagonal Gaussian, whose actions are not clipped (module doc). With
    `emit_behaviour_logits`, μ's parameters come back in
    `PolicyStep.info["behaviour_logits"]` (a nest like the action spec), so
    a driver stores them in the trajectories' `policy_info`. `ImpalaAgent`
    builds one as its collect policy and wraps another in `GreedyPolicy` as
    its policy; you rarely build one yourself.

    Recurrent networks: see the module doc ("Recurrent actor and value
    networks"); the policy state is a dict with an entry per recurrent
    network, and with `emit_behaviour_logits` the state each step started
    from is recorded in ``info["policy_state"]``.
    """

    def __init__(self, time_step_spec, action_spec, actor_network,
                 emit_behaviour_logits=True, value_network=None, name=None):
        """Builds the policy.

        Args:
          time_step_spec: A `TimeStep` spec of the environment.
          action_spec: A nest of bounded integer specs (the action heads), or
            one bounded float spec of shape (D,).
          actor_network: A `tf_agents.networks.Network`, feed-forward or
            recurrent, that outputs, per head, a Categorical distribution or
            its logits, or a diagonal Gaussian for a continuous spec.
          emit_behaviour_logits: Record μ's parameters in the policy info,
            and the policy state each step started from if there is one.
          value_network: The learner's value network, carried along only if
            it is recurrent (its state must be known where a window starts);
            None: the policy's state is the actor's alone.
          name: The policy's name.
        """
        recurrent = _recurrent(
            {"actor_network": actor_network, "value_network": value_network})
        state_spec = {name: network.state_spec
                      for name, network in recurrent.items()} or ()
        info_spec = {}
        if emit_behaviour_logits:
            info_spec[BEHAVIOUR_LOGITS] = tf.nest.map_structure(_params_spec,
                                                                action_spec)
            if state_spec:
                info_spec[POLICY_STATE] = _lists_as_tuples(state_spec)
        super().__init__(time_step_spec, action_spec,
                         policy_state_spec=state_spec,
                         info_spec=info_spec or (), name=name,
                         clip=not _is_continuous(action_spec))
        self._actor_network = actor_network
        self._recurrent_networks = recurrent
        self._emit_behaviour_logits = emit_behaviour_logits

    def _variables(self):
        networks = {"actor_network": self._actor_network,
                    **self._recurrent_networks}
        return [v for network in networks.values() for v in network.variables]

    def _distribution(self, time_step, policy_state):
        state = dict(policy_state or {})
        observation, step_type = time_step.observation, time_step.step_type
        params, actor_state = _actor_params(self._actor_network, observation,
                                            step_type, state, training=False)
        tf.nest.assert_same_structure(params, self.action_spec)
        distributions_ = tf.nest.map_structure(_head_distribution, params,
                                               self.action_spec)
        next_state = {}
        for name, network in self._recurrent_networks.items():
            next_state[name] = actor_state if name == "actor_network" else _apply(
                network, name, observation, step_type, state, training=False)[1]
        info = {}
        if self._emit_behaviour_logits:
            info[BEHAVIOUR_LOGITS] = params
            if next_state:
                info[POLICY_STATE] = _lists_as_tuples(policy_state)
        return policy_step.PolicyStep(distributions_, next_state or (), info or ())


def _checked_options(action_spec, pg_target, gradient_clipping, vtrace, costs):
    """`ImpalaAgent`'s options as records, checked when the agent is made
    (not at the first `train`, after collecting data)."""
    _checks.check_choice(pg_target, "pg_target", impala.PG_TARGETS)
    if gradient_clipping is not None and not gradient_clipping > 0:
        raise ValueError("`gradient_clipping` must be a positive global "
                         f"norm or None, got {gradient_clipping!r}.")
    vtrace = _options.VTraceOptions(
        pg_target, *vtrace, time_major=False,
        dist_class=(distributions.diagonal_gaussian if _is_continuous(action_spec)
                    else None))
    costs = _options.LossCosts(*costs)
    _checks.check_hyperparameters(vtrace)
    _checks.check_loss_costs(costs, impala.REDUCTIONS)
    return vtrace, costs


def _policies(time_step_spec, action_spec, actor_network, value_network):
    """The collect policy (records μ) and the greedy policy of an agent."""
    collect_policy = ImpalaPolicy(
        time_step_spec, action_spec, actor_network, emit_behaviour_logits=True,
        value_network=value_network, name="impala_collect_policy")
    policy = greedy_policy.GreedyPolicy(ImpalaPolicy(
        time_step_spec, action_spec, actor_network, emit_behaviour_logits=False,
        name="impala_policy"))
    return collect_policy, policy


def _initial_state(state_spec, experience):
    """The recorded state each window started from (row 0): {} without
    recurrent networks. (`train` and `loss` refuse experience without it:
    TF-Agents checks it against `training_data_spec`.)"""
    if not state_spec:
        return {}
    recorded = experience.policy_info[POLICY_STATE]  # tuples for lists
    return tf.nest.pack_sequence_as(state_spec, [
        t[:, 0] for t in tf.nest.flatten(recorded)])


def _unique_variables(*networks):
    """The networks' trainable variables, a layer shared by two once."""
    variables, seen = [], set()
    for variable in (v for n in networks for v in n.trainable_variables):
        if variable.ref() not in seen:
            seen.add(variable.ref())
            variables.append(variable)
    return variables


def _write_debug_summaries(inputs, targets, gradient_norm, step):
    valid = targets.valid
    histograms = {
        "rewards": inputs.rewards, "discounts": inputs.discounts,
        "values": inputs.values, "vs": targets.vs,
        "pg_advantages": targets.pg_advantages,
        "rho": tf.exp(targets.log_rhos)}
    with tf.name_scope("VTrace/"):
        for name, tensor in histograms.items():
            tf.summary.histogram(name, tf.boolean_mask(tensor, valid), step=step)
        tf.summary.scalar("gradient_global_norm", gradient_norm, step=step)


def _write_scalar_summaries(loss_info, step):
    fields = loss_info.extra._asdict()
    with tf.name_scope("Losses/"):
        tf.summary.scalar("loss", loss_info.loss, step=step)
        for name in _LOSS_TERMS:
            tf.summary.scalar(name, fields[name], step=step)
    with tf.name_scope("VTrace/"):
        for name in _STATISTICS:
            tf.summary.scalar(name, fields[name], step=step)


class ImpalaAgent(tf_agent.TFAgent):
    r"""IMPALA (Espeholt et al. 2018): an actor-critic agent trained with V-trace.

    `train(experience)` takes batch-major trajectories ``[B, T + 1, ...]`` of
    any length collected by `collect_policy` (which records μ's parameters in
    ``policy_info["behaviour_logits"]``), computes the learner's π and values
    V on all T + 1 observations, and minimizes `tf_vtrace.impala_loss` over
    the T transitions with ``mask = ~is_boundary()``, rewards
    ``reward_scale_factor · reward`` and discounts
    ``discount_factor · discount`` (TF-Agents' discount: 0 at a termination,
    1 otherwise, also at a time limit, which therefore bootstraps). See the
    module doc for the layout, continuous actions and recurrent networks
    (the greedy `policy` carries the actor's state only). It returns
    `LossInfo(loss, extra=ImpalaLossInfo(...))` and increments
    `train_step_counter` once.

    Summaries (written when a default `tf.summary` writer is set): the loss and
    every `ImpalaLossInfo` field as scalars (``Losses/``, ``VTrace/``) unless
    `enable_summaries` is False; with `debug_summaries`, histograms of the
    valid steps' rewards, discounts, values, vs, advantages and ρ, and the
    gradient norm; with `summarize_grads_and_vars`, the variables and
    gradients.

    Examples:
      >>> import tensorflow as tf, tf_keras
      >>> from tf_agents.networks import actor_distribution_network, value_network
      >>> from tf_agents.specs import tensor_spec
      >>> from tf_agents.trajectories import time_step as ts
      >>> from tf_vtrace.tf_agents import ImpalaAgent
      >>> observation_spec = tf.TensorSpec([4], tf.float32)
      >>> action_spec = tensor_spec.BoundedTensorSpec((), tf.int64, 0, 1)
      >>> agent = ImpalaAgent(
      ...     ts.time_step_spec(observation_spec), action_spec,
      ...     actor_distribution_network.ActorDistributionNetwork(
      ...         observation_spec, action_spec, fc_layer_params=(16,)),
      ...     value_network.ValueNetwork(observation_spec, fc_layer_params=(16,)),
      ...     tf_keras.optimizers.Adam(1e-3))
      >>> agent.collect_policy.info_spec["behaviour_logits"].shape
      TensorShape([2])
      >>> experience = tf.nest.map_structure(  # B = 3 windows of T + 1 = 6 steps
      ...     lambda spec: tf.zeros([3, 6] + spec.shape, spec.dtype),
      ...     agent.training_data_spec)
      >>> loss_info = agent.train(experience)
      >>> int(agent.train_step_counter), loss_info.extra._fields[:2]
      (1, ('policy_loss', 'baseline_loss'))
    """

    def __init__(self,
                 time_step_spec,
                 action_spec,
                 actor_network,
                 value_network,
                 optimizer,
                 discount_factor=0.99,
                 reward_scale_factor=1.0,
                 baseline_cost=0.5,
                 entropy_cost=0.00025,
                 kl_cost=0.0,
                 reduction="sum",
                 pg_target="vs",
                 clip_rho_threshold=1.0,
                 clip_pg_rho_threshold=1.0,
                 clip_c_threshold=1.0,
                 lambda_=1.0,
                 alpha_=1.0,
                 gradient_clipping=None,
                 debug_summaries=False,
                 summarize_grads_and_vars=False,
                 enable_summaries=True,
                 train_step_counter=None,
                 name=None):
        """Builds the agent, its collect policy and its greedy policy.

        Args:
          time_step_spec: A `TimeStep` spec of the environment.
          action_spec: A nest of bounded integer specs with minimum 0, one per
            action head (a tuple or dict of heads trains with the sum of their
            log-probabilities, i.e. independent heads), or one bounded float
            spec of shape (D,) (a diagonal Gaussian; module doc).
          actor_network: A `tf_agents.networks.Network` that maps
            observations to a Categorical distribution or to logits per head
            (or to a diagonal Gaussian), e.g. an `ActorDistributionNetwork`,
            or a recurrent one that resets its state at step_type FIRST, e.g.
            an `ActorDistributionRnnNetwork`.
          value_network: A network that maps observations to one value each,
            e.g. a `ValueNetwork` or a `ValueRnnNetwork`; either network may
            be recurrent without the other.
          optimizer: A `tf_keras` optimizer for both networks.
          discount_factor: γ, multiplied with the environment's discount.
          reward_scale_factor: Multiplies the rewards.
          baseline_cost: Weight of the value loss ½ (vs − V)².
          entropy_cost: Weight of the entropy bonus.
          kl_cost: Weight of KL(μ ‖ π).
          reduction: ``"sum"``, ``"mean"`` or ``"masked_mean"`` over steps (see
            `tf_vtrace.impala_loss`).
          pg_target: ``"vs"`` (SEED RL) or ``"lambda_returns"`` (rlax).
          clip_rho_threshold: ρ̄, a positive scalar or None.
          clip_pg_rho_threshold: ρ̄_pg, a positive scalar or None.
          clip_c_threshold: c̄, a positive scalar or None.
          lambda_: λ, the trace-cutting mixing parameter.
          alpha_: Leaky V-trace's α in [0, 1] (1: V-trace; see
            `tf_vtrace.from_importance_weights`).
          gradient_clipping: Clip the gradients to this global norm
            (`tf.clip_by_global_norm`, as IMPALA does); None: no clipping.
          debug_summaries: Also write histograms and the gradient norm.
          summarize_grads_and_vars: Also write variable and gradient summaries.
          enable_summaries: Write the scalar summaries at all.
          train_step_counter: A scalar int64 variable incremented once per
            `train`; None: the global step.
          name: The agent's name (its variables' scope).

        Raises:
          RuntimeError: If tf.keras is Keras 3 (TF_USE_LEGACY_KERAS=1 was not
            set before TensorFlow was imported).
          ValueError: For an unsupported action spec or an unknown option
            value.
        """
        _require_legacy_keras()
        tf.Module.__init__(self, name=name)
        self._vtrace_options, self._costs = _checked_options(
            action_spec, pg_target, gradient_clipping,
            (clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold,
             lambda_, alpha_),  # `_options.VTRACE_HYPERPARAMETERS` after pg_target
            (baseline_cost, entropy_cost, kl_cost, reduction))
        for network, label in ((actor_network, "actor_network"),
                               (value_network, "value_network")):
            _check_network(network, label, time_step_spec.observation)
        self._actor_network = actor_network
        self._value_network = value_network
        self._optimizer = optimizer
        self._discount_factor = discount_factor
        self._reward_scale_factor = reward_scale_factor
        self._gradient_clipping = gradient_clipping
        collect_policy, policy = _policies(time_step_spec, action_spec,
                                           actor_network, value_network)
        super().__init__(
            time_step_spec, action_spec, policy, collect_policy,
            train_sequence_length=None, debug_summaries=debug_summaries,
            summarize_grads_and_vars=summarize_grads_and_vars,
            enable_summaries=enable_summaries,
            train_step_counter=train_step_counter)
        self._as_trajectory = data_converter.AsTrajectory(
            self.data_context, sequence_length=None)

    @property
    def actor_network(self):
        """The network of π and μ (the collect policy acts with it)."""
        return self._actor_network

    @property
    def value_network(self):
        """The network of V."""
        return self._value_network

    def _initialize(self):
        pass

    def _loss_inputs(self, experience, training):
        """`impala_loss`'s data arguments, batch-major, from a trajectory."""
        experience = self._as_trajectory(experience)
        length = tf.compat.dimension_value(experience.step_type.shape[1])
        if length is not None and length < 2:
            raise ValueError(
                "`experience` must hold windows of T + 1 ≥ 2 steps (the last "
                "observation gives the bootstrap value), e.g. "
                f"`as_dataset(num_steps=T + 1)`; got {length} step(s).")
        observation, step_type = experience.observation, experience.step_type
        state = _initial_state(self.collect_policy.policy_state_spec, experience)
        params, _ = _actor_params(self._actor_network, observation, step_type,
                                  state, training=training)
        values, _ = _apply(self._value_network, "value_network", observation,
                           step_type, state, training=training)

        def steps(nest):  # rows 0 … T − 1: the transitions x_t → x_{t+1}
            return tf.nest.map_structure(lambda t: t[:, :-1], nest)

        def heads(nest):
            return _scalar_heads(steps(nest), self.action_spec)

        return _options.LossInputs(
            behaviour_policy_logits=heads(
                experience.policy_info[BEHAVIOUR_LOGITS]),
            target_policy_logits=heads(params),
            actions=heads(experience.action),
            discounts=self._discount_factor * steps(experience.discount),
            rewards=self._reward_scale_factor * steps(experience.reward),
            values=values[:, :-1],
            bootstrap_value=values[:, -1],
            mask=steps(tf.logical_not(experience.is_boundary())))

    def _regularization_loss(self):
        losses = self._actor_network.losses + self._value_network.losses
        return tf.add_n(losses) if losses else tf.constant(0.)

    def _loss_and_inputs(self, experience, weights, training):
        if weights is not None:
            raise ValueError(
                "ImpalaAgent does not support `weights`: the V-trace targets "
                "couple the steps of a trajectory. Pass weights=None.")
        inputs = self._loss_inputs(experience, training)
        loss, diagnostics = impala.impala_loss(
            **inputs._asdict(), **self._vtrace_options._asdict(),
            **self._costs._asdict())
        regularization = self._regularization_loss()
        extra = ImpalaLossInfo(regularization_loss=regularization,
                               **diagnostics)
        return tf_agent.LossInfo(loss + regularization, extra), inputs

    def _loss(self, experience, weights=None, training=False):
        loss_info, _ = self._loss_and_inputs(experience, weights, training)
        return loss_info

    def _train(self, experience, weights=None):
        variables = _unique_variables(self._actor_network, self._value_network)
        with tf.GradientTape() as tape:
            loss_info, inputs = self._loss_and_inputs(
                experience, weights, training=True)
        tf.debugging.check_numerics(loss_info.loss, "ImpalaAgent loss is inf or nan")
        gradients = tape.gradient(loss_info.loss, variables)
        gradient_norm = tf.linalg.global_norm(gradients)
        if self._gradient_clipping is not None:
            gradients, _ = tf.clip_by_global_norm(
                gradients, self._gradient_clipping, use_norm=gradient_norm)
        grads_and_vars = list(zip(gradients, variables))
        self._write_summaries(loss_info, inputs, grads_and_vars, gradient_norm)
        self._optimizer.apply_gradients(grads_and_vars)
        self.train_step_counter.assign_add(1)
        return loss_info

    def _write_summaries(self, loss_info, inputs, grads_and_vars, gradient_norm):
        step = self.train_step_counter
        if self.summaries_enabled:
            _write_scalar_summaries(loss_info, step)
        if self.debug_summaries:
            # Outside the tape: recomputing the targets costs no gradient work.
            targets = impala.vtrace_targets(
                **inputs._asdict(), **self._vtrace_options._asdict())
            _write_debug_summaries(inputs, targets, gradient_norm, step)
        if self.summarize_grads_and_vars:
            eager_utils.add_variables_summaries(grads_and_vars, step)
            eager_utils.add_gradients_summaries(grads_and_vars, step)
