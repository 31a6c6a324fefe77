"""The agent's configuration: one validated dataclass.

Every field is checked when the `Config` is built, before any environment,
network or file is created, so a bad setting fails at once with an error that
names the field. The environment id is resolved (a ``module:`` prefix is
imported first) and one environment is made and closed to check its spaces
(`tf_vtrace.agent.envs.check_env_id`).

Each field's attribute docstring is also its command-line help
(``python -m tf_vtrace.agent train --help``) and its line in the
configuration reference (docs/reference/config.md).
"""

import dataclasses
import math

from tf_vtrace.agent._choices import (
    ACTOR_INFERENCE,
    BACKENDS,
    CORES,
    CORRECTIONS,
    OPTIMIZERS,
    STRATEGIES,
    VECTOR_ENVS,
)

__all__ = ["ACTOR_INFERENCE", "BACKENDS", "CORES", "CORRECTIONS", "Config",
           "MAX_UPDATES_PER_CALL", "MULTI_WORKER_CHECKPOINT_EVERY", "OPTIMIZERS",
           "STRATEGIES", "VECTOR_ENVS"]


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
# (docs/records/scaling.md).
MAX_UPDATES_PER_CALL = 4
# A multi-worker run's checkpoint interval in updates when
# `Config.checkpoint_every` is None (its hosts' clocks do not agree).
MULTI_WORKER_CHECKPOINT_EVERY = 200
# Each real-valued field: (the test its finite value must pass, what it must be).
_NUMBER_RANGES = {
    "learning_rate": (lambda x: x > 0, "a finite positive number"),
    "max_grad_norm": (lambda x: x > 0, "a finite positive number"),
    "entropy_cost": (lambda x: x >= 0, "a finite number >= 0"),
    "baseline_cost": (lambda x: x >= 0, "a finite number >= 0"),
    "discount": (lambda x: 0 <= x <= 1, "in [0, 1]"),
    "vtrace_lambda": (lambda x: 0 <= x <= 1, "in [0, 1]"),
    "reward_clip": (lambda x: x > 0, "a finite positive number or None"),
    "checkpoint_every_s": (lambda x: x > 0, "a finite positive number"),
}
_OPTIONAL = ("max_episode_steps", "reward_clip", "checkpoint_every")
_BOOLS = ("separate_value_core", "jit_compile", "normalize_observations",
          "scale_rewards", "state_dependent_std")
_CHOICES = {
    "core": CORES, "backend": BACKENDS, "actor_inference": ACTOR_INFERENCE,
    "strategy": STRATEGIES, "correction": CORRECTIONS,
    "optimizer": OPTIMIZERS, "vector_env": VECTOR_ENVS,
}


def _is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _checked_widths(hidden_sizes):
    _require(isinstance(hidden_sizes, (tuple, list)) and len(hidden_sizes) >= 1
             and all(_is_integer(h) and h >= 1 for h in hidden_sizes),
             "hidden_sizes", "a non-empty tuple of positive integers",
             hidden_sizes)
    return tuple(hidden_sizes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    """Hyperparameters of one IMPALA run; the defaults train CartPole-v1.

    The defaults: 16 envs × T = 20 steps in one actor thread beside the
    learner, V-trace, the IMPALA paper's RMSProp at 8e-3 decayed linearly
    to 0 over 300k env steps, the gradient clipped at norm 40. How they
    learn over 30 seeds is in docs/tutorials/agent.md. Fields are
    keyword-only.
    """

    # --- The environment ---
    env_id: str = "CartPole-v1"
    """A gymnasium id (``module:EnvId-v0`` imports ``module`` first) or
    ``module:ClassName`` of a `gymnasium.Env` subclass; Box observations."""
    max_episode_steps: int = None
    """Override the env's time limit (None: its own)."""
    reward_clip: float = None
    """Clip rewards to ±reward_clip (None: no clipping)."""
    normalize_observations: bool = False
    """Normalise observations by their running mean and std (clipped to
    ±10), statistics kept in the network's weights (vector observations)."""
    scale_rewards: bool = False
    """Divide rewards by the running std of the discounted return (clipped
    to ±10), as SB3's VecNormalize; after reward_clip."""

    # --- The loss ---
    correction: str = "vtrace"
    """Off-policy correction: vtrace, none (ρ = c = 1), is1 (1-step
    importance sampling) or epsilon (ε-correction); True/False alias
    vtrace/none."""
    discount: float = 0.99
    """γ, the discount per step."""
    entropy_cost: float = 0.01
    """Weight of the entropy bonus."""
    baseline_cost: float = 0.5
    """Weight of the value loss ½ (vs − V)²."""
    vtrace_lambda: float = 1.0
    """λ of V-trace's traces, c_i = λ min(c̄, ρ_i) (Espeholt et al. 2018,
    remark 2); 1: the full T-step target."""

    # --- The optimizer ---
    optimizer: str = "rmsprop"
    """rmsprop (the IMPALA paper's: ρ = 0.99, ε = 0.01 inside the root) or
    adam (ε = 1e-5); `tf_vtrace.agent.learner.make_optimizer`."""
    learning_rate: float = 8e-3
    """The initial step size, decayed linearly to 0 over the run."""
    max_grad_norm: float = 40.
    """Clip the gradient to this global norm."""

    # --- The network ---
    hidden_sizes: tuple = (64, 64)
    """Widths of the MLP towers (vector observations), or of the torso
    before the LSTM."""
    core: str = "none"
    """none (feed-forward) or lstm (an LSTM between torso and heads, its
    state carried by the actor and replayed by the learner)."""
    core_size: int = 64
    """The LSTM's units."""
    separate_value_core: bool = False
    """With core lstm: the value head gets its own torso and LSTM, so the
    value loss cannot move the policy's memory."""
    state_dependent_std: bool = False
    """Box actions: the Gaussian's log-std is a dense layer of the policy
    features (else one learned vector, independent of the state)."""

    # --- The actors ---
    backend: str = "thread"
    """Where the actors run: thread (beside the learner), local (in turn
    with it: synchronous), process (worker processes) or ray (Ray actors)."""
    num_actors: int = 1
    """Actors, each stepping num_envs envs (1 with backend local)."""
    num_envs: int = 16
    """B, environments stepped in sync by each actor."""
    unroll_length: int = 20
    """T, env steps per unroll (one unroll per learner update)."""
    vector_env: str = "auto"
    """What steps the envs: gymnasium (SyncVectorEnv), numpy (CartPole's
    array step), envpool (C++), auto (numpy where it exists, else gymnasium)."""
    actor_inference: str = "auto"
    """How actors compute the policy: auto (NumPy for the feed-forward MLP,
    else a compiled TensorFlow function) or tensorflow (always the latter)."""
    queue_size: int = 8
    """Unrolls the thread backend's actors may queue ahead of the learner."""
    policy_lag: int = 0
    """Extra learner updates the actors' weights are held back (an
    artificial lag for ablations; exactly the lag with backend local)."""
    max_actor_failures: int = 3
    """Stop the run when a process or Ray actor died or failed this many
    times in a row (fewer are replaced by a fresh actor)."""

    # --- The learner ---
    strategy: str = "none"
    """tf.distribute strategy: none (one device), mirrored (this host's
    GPUs or CPUs) or multi_worker (hosts from TF_CONFIG)."""
    jit_compile: bool = True
    """XLA-compile the learner step."""
    updates_per_call: int = 2
    """The most learner updates one compiled call makes on unrolls already
    waiting (1 to `MAX_UPDATES_PER_CALL`)."""
    max_nonfinite_updates: int = 10
    """Stop the run after this many updates in a row were skipped for a
    non-finite loss or gradient norm."""

    # --- The run ---
    total_env_steps: int = 300_000
    """Stop after this many environment steps (T·B per update)."""
    seed: int = 0
    """Seeds the environments, the action sampling and the weights."""
    checkpoint_every: int = None
    """Learner updates between checkpoints (None: every checkpoint_every_s
    seconds; in a multi-worker run, `MULTI_WORKER_CHECKPOINT_EVERY`)."""
    checkpoint_every_s: float = 30.
    """Seconds of training between checkpoints, when checkpoint_every is
    None."""
    eval_every: int = 0
    """Evaluate the greedy policy every this many env steps and at the end,
    keeping the best in policy_best/ (0: never)."""
    eval_episodes: int = 10
    """Episodes per evaluation (one env each, played at once)."""

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
            _require(_is_finite_number(value) and test(value), field, expected,
                     value)
        _require(self.updates_per_call <= MAX_UPDATES_PER_CALL,
                 "updates_per_call", f"at most {MAX_UPDATES_PER_CALL}",
                 self.updates_per_call)

    def _check_choices(self):
        for field, choices in _CHOICES.items():
            value = getattr(self, field)
            _require(isinstance(value, str) and value in choices, field,
                     f"one of {choices}", value)
        for field in _BOOLS:
            value = getattr(self, field)
            _require(isinstance(value, bool), field, "True or False", value)
        # The MLP's towers are separate already, the CNNs' trunk is shared:
        # the flag would mean nothing there.
        _require(not self.separate_value_core or self.core == "lstm",
                 "separate_value_core", "False unless core='lstm'",
                 self.separate_value_core)
        # Each host would merge its own observations into its copy.
        _require(self.strategy != "multi_worker" or not (
            self.normalize_observations or self.scale_rewards),
            "normalize_observations", "False with strategy 'multi_worker' "
            "(and scale_rewards)", self.normalize_observations)
        _require(self.backend != "local" or self.num_actors == 1, "num_actors",
                 "1 with backend 'local' (use 'process' or 'ray')",
                 self.num_actors)

    def _check_env(self):
        # Imported here: the environment check needs gymnasium, the numeric
        # checks do not.
        from tf_vtrace.agent import envs
        envs.check_env_id(self.env_id)
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
