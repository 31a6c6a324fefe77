"""Published numbers the learning benchmarks are drawn against, and their goals.

A `Reference` is one published figure: its value (or a range of values) at
a number of env steps, who measured it, under which protocol (training or
evaluation return, sticky actions or not) and where it is written. A `Goal`
is a target of ours: a mean training return over seeds at (``by="at"``) or
by (``by="within"``) a number of env steps. Both are keyed by the panel
(gymnasium env id) they belong to; `benchmarks.learning.plans` picks them.
"""

import dataclasses

# Protocols, as the figure's legend labels them.
TRAINING_STICKY = "training return, mean of the last 100 episodes, sticky actions p = 0.1"
EVAL_NOT_STICKY = "evaluation return, no sticky actions"
EVAL_STICKY = "evaluation return (100 episodes, sampled actions), sticky actions p = 0.1"
TRAINING = "training return (episodes during training)"
EVAL_DETERMINISTIC = "evaluation return, deterministic policy, one run"
STOP_TARGET = "a stop target (training return), not a result"


@dataclasses.dataclass(frozen=True)
class Reference:
    """A published figure: `value` at `env_steps`, measured by `label`
    under `protocol`, written in `source`."""

    panel: str
    value: float
    env_steps: int
    label: str
    protocol: str
    source: str

    def text(self):
        return (f"{self.value:g} at {steps_text(self.env_steps)} ({self.label}; "
                f"{self.protocol})")


@dataclasses.dataclass(frozen=True)
class Goal:
    """Ours: the mean training return over seeds ≥ `value` at (`by` "at")
    or by ("within") `env_steps`."""

    panel: str
    value: float
    env_steps: int
    by: str = "within"

    def text(self):
        return f"≥ {self.value:g} {self.by} {steps_text(self.env_steps)}"


def steps_text(env_steps):
    """Env steps in short: 1000000 → '1M', 960000 → '960k', 5040 → '5.04k'."""
    if env_steps >= 1_000_000:
        return f"{env_steps / 1e6:g}M"
    return f"{env_steps / 1e3:g}k"


def _minatar(game):
    return f"MinAtar/{game}-v1"


# The MinAtar paper's best baseline per game at 5M env steps.
MINATAR_PAPER_5M = {"Asterix": 20.5, "Breakout": 17.5, "Freeway": 50.,
                    "Seaquest": 20., "SpaceInvaders": 185.}
# Pgx PPO at 20M env steps (read off its README figures).
PGX_20M = {"Asterix": 22., "Breakout": 50., "Freeway": 63., "Seaquest": 54.,
           "SpaceInvaders": 145.}

_PAPER = "kenjyoung/MinAtar README learning curves; Young & Tian 2019, arXiv 1903.03176"
_PAPER_BEST = "MinAtar paper, best of AC(λ), AC(0), DQN (read off its curves)"


def _sb3(panel, value, env_steps):
    return Reference(panel, value, env_steps, "SB3 zoo PPO, tuned", EVAL_DETERMINISTIC,
                     "DLR-RM/rl-baselines3-zoo benchmark.md (v3 MuJoCo, "
                     "LunarLanderContinuous-v2)")


def _cleanrl(panel, value):
    return Reference(panel, value, 1_000_000, "CleanRL ppo_continuous_action",
                     TRAINING, "vwxyzjn/cleanrl docs/benchmark/"
                     "ppo_continuous_action.md (v4 MuJoCo)")


MINATAR = (
    *(Reference(_minatar(game), value, 5_000_000, _PAPER_BEST, TRAINING_STICKY, _PAPER)
      for game, value in MINATAR_PAPER_5M.items()),
    Reference(_minatar("Breakout"), 9.5, 1_000_000, "MinAtar paper, AC(λ = 0.8)",
              TRAINING_STICKY, _PAPER),
    Reference(_minatar("Breakout"), 16.6, 960_000, "gymnax-blines PPO",
              EVAL_NOT_STICKY, "RobertTLange/gymnax-blines agents/Breakout-MinAtar "
              "(gymnax's MinAtar)"),
    *(Reference(_minatar(game), value, 20_000_000, "Pgx PPO", EVAL_STICKY,
                "sotetsuk/pgx examples/minatar-ppo (README figures, train.py)")
      for game, value in PGX_20M.items()),
)

# Goals: at 5M, at or above the paper's best baseline (on at least 4 of
# the 5 games); Breakout >= 9.5 at 1M.
MINATAR_GOALS = (
    *(Goal(_minatar(game), value, 5_000_000, "at")
      for game, value in MINATAR_PAPER_5M.items()),
    Goal(_minatar("Breakout"), 9.5, 1_000_000, "at"),
)

CONTINUOUS = (
    _sb3("Pendulum-v1", -172.2, 100_000),
    Reference("Pendulum-v1", -200., 5_000_000, "RLlib IMPALA example", STOP_TARGET,
              "ray-project/ray rllib/examples/algorithms/impala/pendulum_impala.py"),
    _sb3("LunarLanderContinuous-v3", 270.9, 1_000_000),
    _cleanrl("HalfCheetah-v5", 1442.6),
    _sb3("HalfCheetah-v5", 5819.1, 1_000_000),
    _cleanrl("Hopper-v5", 2382.9),
    _sb3("Hopper-v5", 2410.4, 1_000_000),
    _cleanrl("Walker2d-v5", 2288.),
    _sb3("Walker2d-v5", 3478.8, 1_000_000),
)

CONTINUOUS_GOALS = (
    Goal("Pendulum-v1", -200., 500_000),
    Goal("LunarLanderContinuous-v3", 200., 2_000_000),
    Goal("HalfCheetah-v5", 1443., 1_000_000),
    Goal("HalfCheetah-v5", 3000., 3_000_000),
    Goal("Hopper-v5", 2000., 2_000_000),
)

# The CartPole demo's target (docs/tutorials/agent.md), for the quick plan.
CARTPOLE_GOALS = (Goal("CartPole-v1", 475., 300_000),)
