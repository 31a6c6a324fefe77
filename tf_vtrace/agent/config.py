"""The agent's configuration: one validated dataclass.

Every field is checked when the `Config` is built, before any environment,
network or file is created, so a bad setting fails at once with an error that
names the field. The environment id is looked up in gymnasium's registry and
one environment is made and closed to check its spaces (discrete or
multi-discrete actions only).
"""

import dataclasses

__all__ = ["ACTOR_INFERENCE", "BACKENDS", "CORES", "CORRECTIONS", "Config",
           "MAX_UPDATES_PER_CALL", "MULTI_WORKER_CHECKPOINT_EVERY", "OPTIMIZERS",
           "STRATEGIES"]

# `tf_vtrace.agent.backends` implements BACKENDS.
BACKENDS = ("thread", "local", "process", "ray")
# `tf_vtrace.agent.learner.make_strategy` implements STRATEGIES.
STRATEGIES = ("none", "mirrored", "multi_worker")
# `tf_vtrace.agent.corrections` implements CORRECTIONS.
CORRECTIONS = ("vtrace", "none", "is1", "epsilon")
# `tf_vtrace.agent.learner.make_optimizer` implements OPTIMIZERS.
OPTIMIZERS = ("adam", "rmsprop")
# `tf_vtrace.agent.networks.build_network` implements CORES.
CORES = ("none", "lstm")
# `tf_vtrace.agent.actor.LocalActor` implements ACTOR_INFERENCE.
ACTOR_INFERENCE = ("auto", "tensorflow")


def _require(condition, field, expected, value):
    if not condition:
        raise ValueError(f"Config.{field} must be {expected}, got {value!r}.")


# Each integer field and its least value; `_OPTIONAL` fields may be None.
_INTEGER_MINIMA = {
    "num_envs": 1, "unroll_length": 1, "policy_lag": 0, "total_env_steps": 1,
    "checkpoint_every": 1, "seed": 0, "num_actors": 1, "queue_size": 1,
    "max_nonfinite_updates": 1, "max_actor_failures": 1, "core_size": 1,
    "eval_every": 0, "eval_episodes": 1, "max_episode_steps": 1,
    "updates_per_call": 1,
}
# The most `Config.updates_per_call`: each more is one more copy of the
# update in the compiled step, ≈ 0.5 s more to compile at the start
# (docs/scaling.md).
MAX_UPDATES_PER_CALL = 4
# A multi-worker run's checkpoint interval in updates when
# `Config.checkpoint_every` is None (its hosts' clocks do not agree).
MULTI_WORKER_CHECKPOINT_EVERY = 200
# Each real-valued field: (the test its value must pass, what it must be).
_NUMBER_RANGES = {
    "learning_rate": (lambda x: x > 0, "a positive number"),
    "max_grad_norm": (lambda x: x > 0, "a positive number"),
    "entropy_cost": (lambda x: x >= 0, "a number >= 0"),
    "baseline_cost": (lambda x: x >= 0, "a number >= 0"),
    "discount": (lambda x: 0 <= x <= 1, "in [0, 1]"),
    "vtrace_lambda": (lambda x: 0 <= x <= 1, "in [0, 1]"),
    "reward_clip": (lambda x: x > 0, "a positive number or None"),
    "checkpoint_every_s": (lambda x: x > 0, "a positive number"),
}
_OPTIONAL = ("max_episode_steps", "reward_clip", "checkpoint_every")
_CHOICES = {
    "core": CORES, "backend": BACKENDS, "actor_inference": ACTOR_INFERENCE,
    "strategy": STRATEGIES, "correction": CORRECTIONS,
    "optimizer": OPTIMIZERS,
}


def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _checked_widths(hidden_sizes):
    _require(isinstance(hidden_sizes, (tuple, list)) and len(hidden_sizes) >= 1
             and all(_is_integer(h) and h >= 1 for h in hidden_sizes),
             "hidden_sizes", "a non-empty tuple of positive integers",
             hidden_sizes)
    return tuple(hidden_sizes)


@dataclasses.dataclass(frozen=True)
class Config:
    """Hyperparameters of one IMPALA run (defaults: the CartPole demo).

    The CartPole defaults: 16 envs × T = 20, the IMPALA paper's RMSProp
    (ε = 0.01) at 8e-3 decayed linearly to 0 over 300k env steps, the
    gradient clipped at the paper's norm 40 (where CartPole's gradients
    rarely are). Measured over 30 seeds each (docs/agent.md, "The
    optimizer"): the training return reached 475 on 30 of 30 (median 132k
    env steps) and ended ≥ 475 on 30 of 30; with Adam at 2e-3 and a clip of
    0.5, the defaults until 6 December 2026, it reached 475 on 24 and ended
    there on 19 (late collapse; 26 and 22 in a rerun of the same seeds).
    RMSProp's steps shrink with the gradient once the policy has converged,
    Adam's do not (`tf_vtrace.agent.learner.make_optimizer`). RMSProp at 5e-3 and 1.2e-2
    learned as well; 3e-3 too slowly for 300k steps.

    Attributes:
      env_id: A gymnasium id with a Discrete or MultiDiscrete action space
        (`ALE/...` ids need the `atari` extra).
      num_envs: B, environments stepped in sync by the actor.
      unroll_length: T, steps per unroll.
      policy_lag: How many learner updates the actor's weights are held
        behind the learner's on top of the lag acting and learning at once
        gives (an artificial lag for ablations; with ``backend="local"``,
        the synchronous loop, the lag is exactly this).
      total_env_steps: Stop after this many environment steps (T·B per update).
      learning_rate: The optimizer's initial step size, decayed linearly
        to 0.
      entropy_cost: Weight of the entropy bonus.
      baseline_cost: Weight of ½ (vs − V)².
      discount: γ.
      vtrace_lambda: λ of the value target's traces, c_i = λ min(c̄, ρ_i)
        (Espeholt et al. 2018, remark 2; with ρ = c = 1 the TD(λ) return);
        1: the full T-step V-trace target.
      max_grad_norm: Clip the gradient to this global norm.
      optimizer: One of `OPTIMIZERS`: ``"adam"`` (ε = 1e-5) or
        ``"rmsprop"``, the IMPALA paper's (decay ρ = 0.99, no momentum,
        ε = 0.01 inside the square root, as TF1's ``RMSPropOptimizer``
        and Keras' `RMSprop`): each step is at most lr·g/√0.01, so once
        the gradient is small (the policy has converged) the steps are
        small too, where Adam's steps keep their size; see
        `tf_vtrace.agent.learner.make_optimizer`.
      correction: The off-policy correction, one of `CORRECTIONS`:
        ``"vtrace"``, ``"none"`` (ρ = c = 1: log μ is replaced by log π
        without gradient, plain actor-critic on stale data), ``"is1"``
        (1-step importance sampling) or ``"epsilon"`` (ε-correction); see
        `tf_vtrace.agent.corrections`. True and False are kept as aliases
        of ``"vtrace"`` and ``"none"`` (the field was a bool).
      hidden_sizes: Widths of the MLP towers (vector observations), or of
        the torso before the LSTM.
      core: ``"none"`` (feed-forward) or ``"lstm"``: an LSTM between the
        torso and the heads, its state carried by the actor and replayed by
        the learner (`tf_vtrace.agent._recurrent`; vector observations).
      core_size: The LSTM's units.
      separate_value_core: With ``core="lstm"``: the value head gets its
        own torso and LSTM beside the policy's (two pathways, no weight
        shared, as the MLP's separate towers; RLlib's ``vf_share_layers=
        False``), so that the value loss cannot move the policy's memory;
        the core state holds both LSTMs' units, [2, 2·core_size].
      max_episode_steps: Override the env's time limit (None: its own).
      reward_clip: Clip rewards to ±reward_clip (None: no clipping).
      seed: Seeds the environments, the action sampling and the weights.
      jit_compile: XLA-compile the learner step.
      checkpoint_every: Learner updates between checkpoints; None (the
        default): every `checkpoint_every_s` seconds instead, except in a
        multi-worker run, whose hosts must all checkpoint at the same
        update: there every `MULTI_WORKER_CHECKPOINT_EVERY` (200) updates.
      checkpoint_every_s: Seconds of training between checkpoints (when
        `checkpoint_every` is None; not in a multi-worker run). By time,
        not updates: the default pipeline makes hundreds of updates a
        second on 2 cores, and a checkpoint (≈ 50 ms) every 200 of them
        was ≈ 10 % of its wall time.
      backend: Where the actors run: ``"thread"`` (threads of this
        process acting while the learner learns: the default),
        ``"local"`` (in this process, in turn with the learner: the
        synchronous, reproducible loop), ``"process"`` (worker processes)
        or ``"ray"`` (Ray actors, the `ray` extra); see
        `tf_vtrace.agent.backends`.
      num_actors: Actors, each stepping `num_envs` envs (1 with ``"local"``).
      vector_env: What steps the `num_envs` envs, all with the same unroll
        contract (`tf_vtrace.agent.envs`): ``"auto"`` (the default:
        ``"numpy"`` where it exists, else ``"gymnasium"``),
        ``"gymnasium"`` (`gymnasium.vector.SyncVectorEnv`, one Python env
        per copy), ``"numpy"`` (gymnasium's NumPy-vectorized CartPole, one
        array step for all copies; CartPole-v0/v1 only) or ``"envpool"``
        (EnvPool's C++ envs, the `envpool` extra; ids it shares with
        gymnasium, such as CartPole-v1).
      actor_inference: How the actors compute the policy at each step:
        ``"auto"`` (NumPy for the feed-forward MLP of vector observations,
        `tf_vtrace.agent.networks.MLPForward`, a compiled TensorFlow
        function for the CNNs and the LSTM) or ``"tensorflow"`` (always the
        compiled function). The learner, the export and the evaluation
        always use TensorFlow; the two agree to float32 rounding.
      queue_size: Unrolls the ``"thread"`` backend's actors may queue ahead
        of the learner (they wait while it is full). 8: on 2 cores the
        actor thread and the learner now run at rates a few per cent apart,
        and the deeper queue absorbs the jitter of their turns: both waited
        ≤ 10 % of the time in 7 of 8 runs, against 7 of 12 with 4 and 0 of
        4 with 2 (docs/scaling.md); the policy lag is ≈ 5–7 updates,
        ≈ 3–5 with `updates_per_call` 2 (docs/agent.md: the 30 seeds'
        learning with it). It was 1 until 6 December 2026, then 2.
      updates_per_call: The most learner updates one compiled call makes (1 to
        `MAX_UPDATES_PER_CALL`): when the learner takes an unroll and more are
        ready already (queued by the ``"thread"`` backend's actors, or finished
        by the other actors of the ``"process"`` and ``"ray"`` backends), it
        makes an update on each of them in turn, in the same call, each on the
        weights the one before left: the same updates as one call each, with
        one call's fixed cost (the dispatch, the threads' turns on 2 cores, the
        weights' copy) for all. The actors get the weights after the last. 2:
        on 2 cores, with the actor thread acting beside it, an update took
        1.2–1.3 ms in pairs against 1.4–2.4 ms one per call, and both sides
        waited ≤ 10 % of the time in 12 runs of 12 of the bench's command,
        against 10 of 12 (docs/scaling.md); with the ``"process"`` backend's 2
        actors, 1.04–1.46× the env steps/s of one per call in 6 runs of 6. A
        call stops before an evaluation, a checkpoint by update count and the
        run's last update, so that they come where they would. 1: one update
        per call, as before 7 December 2026 (and always under a `strategy`, and
        with the synchronous ``"local"`` backend, which acts only when the
        learner asks).
      strategy: The learner's `tf.distribute` strategy: ``"none"`` (one
        device), ``"mirrored"`` (`tf.distribute.MirroredStrategy` over this
        host's GPUs, else its logical CPU devices) or ``"multi_worker"``
        (`tf.distribute.MultiWorkerMirroredStrategy`, hosts from
        ``TF_CONFIG``); see `tf_vtrace.agent.learner.make_strategy`. The
        `num_envs` envs of an unroll are split evenly over this host's
        devices.
      max_nonfinite_updates: Stop the run (with an error naming the
        diagnostics) after this many learner updates in a row were skipped
        because the loss or the gradient norm was non-finite.
      max_actor_failures: Stop the run (with an error naming the actor and
        its last traceback) when an actor of the ``"process"`` or ``"ray"``
        backend has died or failed this many times in a row; fewer are
        replaced by a fresh actor with the current weights.
      eval_every: Evaluate the greedy policy every this many env steps and
        at the end of the run, and keep the best one in ``policy_best/``
        (`tf_vtrace.agent.evaluate.TrainingEvaluation`); 0: never (the
        default, as in RLlib and SB3; `make demo` uses 50000).
      eval_episodes: Episodes per evaluation (one env each, played at
        once).
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 16
    unroll_length: int = 20
    policy_lag: int = 0
    total_env_steps: int = 300_000
    learning_rate: float = 8e-3
    entropy_cost: float = 0.01
    baseline_cost: float = 0.5
    discount: float = 0.99
    vtrace_lambda: float = 1.0
    max_grad_norm: float = 40.
    optimizer: str = "rmsprop"
    correction: str = "vtrace"
    hidden_sizes: tuple = (64, 64)
    core: str = "none"
    core_size: int = 64
    separate_value_core: bool = False
    max_episode_steps: int = None
    reward_clip: float = None
    seed: int = 0
    jit_compile: bool = True
    checkpoint_every: int = None
    checkpoint_every_s: float = 30.
    backend: str = "thread"
    num_actors: int = 1
    queue_size: int = 8
    vector_env: str = "auto"
    actor_inference: str = "auto"
    strategy: str = "none"
    max_nonfinite_updates: int = 10
    max_actor_failures: int = 3
    eval_every: int = 0
    eval_episodes: int = 10
    updates_per_call: int = 2

    def __post_init__(self):
        # True and False: the field's old bool values, kept as aliases.
        if isinstance(self.correction, bool):
            object.__setattr__(self, "correction",
                               "vtrace" if self.correction else "none")
        object.__setattr__(self, "hidden_sizes", _checked_widths(
            self.hidden_sizes))
        self._check_numbers()
        self._check_choices()
        self._check_env()

    def _check_numbers(self):
        for field, minimum in _INTEGER_MINIMA.items():
            value = getattr(self, field)
            if value is None and field in _OPTIONAL:
                continue
            _require(_is_integer(value) and value >= minimum, field,
                     f"an integer >= {minimum}", value)
        for field, (test, expected) in _NUMBER_RANGES.items():
            value = getattr(self, field)
            if value is None and field in _OPTIONAL:
                continue
            _require(_is_number(value) and test(value), field, expected, value)
        _require(self.updates_per_call <= MAX_UPDATES_PER_CALL,
                 "updates_per_call", f"at most {MAX_UPDATES_PER_CALL}",
                 self.updates_per_call)

    def _check_choices(self):
        for field, choices in _CHOICES.items():
            value = getattr(self, field)
            _require(value in choices, field, f"one of {choices}", value)
        _require(isinstance(self.separate_value_core, bool),
                 "separate_value_core", "a bool", self.separate_value_core)
        # The MLP's towers are separate already, the CNNs' trunk is shared:
        # the flag would mean nothing there.
        _require(not self.separate_value_core or self.core == "lstm",
                 "separate_value_core", "False unless core='lstm'",
                 self.separate_value_core)
        _require(self.backend != "local" or self.num_actors == 1, "num_actors",
                 "1 with backend 'local' (use 'process' or 'ray')",
                 self.num_actors)

    def _check_env(self):
        # Imported here: the environment check needs gymnasium, the numeric
        # checks do not.
        from tf_vtrace.agent import envs
        envs.check_env_id(self.env_id)
        _require(self.vector_env in envs.VECTOR_ENVS, "vector_env",
                 f"one of {envs.VECTOR_ENVS}", self.vector_env)
        if self.vector_env == "envpool":
            envs.check_envpool(self.env_id)
        if self.vector_env == "numpy":
            envs.check_numpy_vector_env(self.env_id)

    @property
    def steps_per_update(self):
        """T · B environment steps per learner update."""
        return self.unroll_length * self.num_envs

    @property
    def checkpoint_updates(self):
        """Updates between checkpoints, or None where they are timed
        (`checkpoint_every_s`)."""
        if self.checkpoint_every is None and self.strategy == "multi_worker":
            return MULTI_WORKER_CHECKPOINT_EVERY
        return self.checkpoint_every

    @property
    def num_updates(self):
        """Learner updates in the run (the learning rate reaches 0 there)."""
        return max(1, -(-self.total_env_steps // self.steps_per_update))

    def replace(self, **changes):
        """A validated copy with `changes` applied."""
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        """The fields as a JSON-serializable dict."""
        return dataclasses.asdict(self)
