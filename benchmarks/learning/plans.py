"""The learning benchmarks' plans: which runs, and what their report draws.

A `Plan` is a list of `Run`s, each a preset, a seed, a number of env steps
and further ``train`` flags, with the panel (env) and setting (its curve)
it is reported under, plus the published references and our goals
(`benchmarks.learning.references`). `benchmarks.learning.runner` trains
the runs; `benchmarks.learning.report` reports them.

* ``minatar`` (`make minatar-benchmark`): the five MinAtar games × 3 seeds ×
  5M env steps, each game's preset as it is.
* ``continuous`` (`make continuous-benchmark`): Pendulum-v1 (500k env
  steps), LunarLanderContinuous-v3 (2M), HalfCheetah-v5 (3M) and Hopper-v5
  (2M) × 3 seeds, each env's preset, to the step count of its goal; plus,
  on HalfCheetah, no correction at the natural lag and both corrections at
  policy lag 16.
* ``minatar-lag`` (`make minatar-lag-benchmark`): MinAtar Breakout and
  SpaceInvaders, V-trace and no correction at policy lags 0, 16 and 64,
  3 seeds × 1M env steps (the earlier lag benchmark's budget,
  `benchmarks.learning.lag_benchmark`).
* ``quick``: CartPole, 2 seeds × 4,800 env steps, a checkpoint every 4
  updates (the suite's version of the path; not a measurement).

A set policy lag is exact in the synchronous loop (``--backend local``, one
actor, as in `benchmarks.learning.lag_benchmark`); the natural lag is the
asynchronous default's. Runs with the same preset, setting and seed are
one run: HalfCheetah's V-trace at the natural lag serves both parts.
"""

import dataclasses
import pathlib
import re

from benchmarks.learning import references

NATURAL = "natural"
SEEDS = (0, 1, 2)


@dataclasses.dataclass(frozen=True)
class Run:
    """One training run: `preset` with `seed` for `env_steps`, plus
    `flags`; reported in the panel `panel` (the env id) as `setting`."""

    panel: str
    setting: str
    preset: str
    seed: int
    env_steps: int
    flags: tuple = ()

    @property
    def label(self):
        return f"{self.panel} {self.setting} seed {self.seed}"

    def directory(self, runs_dir):
        """``runs_dir/<preset>/<setting, as a slug>/seed<seed>``."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.setting.lower()).strip("-")
        return pathlib.Path(runs_dir) / self.preset / slug / f"seed{self.seed}"

    def settings_args(self):
        """The ``train`` flags that set what the run is (no paths)."""
        return ["--preset", self.preset, "--seed", str(self.seed),
                "--total-env-steps", str(self.env_steps), *self.flags]

    def train_args(self, run_dir):
        """The arguments of ``python -m tf_vtrace.agent`` for this run."""
        return ["train", "--out", str(run_dir), "--no-progress", *self.settings_args()]


def setting(correction, lag):
    """(label, flags) of an off-policy correction at a policy lag (an int,
    exact in the synchronous loop, or `NATURAL`)."""
    name = {"vtrace": "V-trace", "none": "no correction"}.get(correction, correction)
    if lag == NATURAL:
        return f"{name}, natural lag", ("--correction", correction)
    return f"{name}, lag {lag}", ("--correction", correction, "--backend", "local",
                                  "--num-actors", "1", "--policy-lag", str(lag))


@dataclasses.dataclass(frozen=True)
class Plan:
    """The runs of one benchmark (in training order, duplicates dropped),
    the panels in order, the references and goals its report draws."""

    name: str
    title: str
    runs: tuple
    references: tuple = ()
    goals: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "runs", tuple(dict.fromkeys(self.runs)))

    @property
    def panels(self):
        return tuple(dict.fromkeys(run.panel for run in self.runs))

    @property
    def settings(self):
        return tuple(dict.fromkeys(run.setting for run in self.runs))

    @property
    def presets(self):
        return tuple(dict.fromkeys(run.preset for run in self.runs))


def grid_runs(panels, settings, seeds=SEEDS):
    """Runs of every panel × setting, seeds the outer loop (a partial
    benchmark has every panel and setting on its first seeds).

    Args:
      panels: {env id: (preset, env steps)}.
      settings: (label, flags) pairs (`setting`).
      seeds: The seeds.
    """
    return tuple(Run(panel, label, preset, seed, env_steps, flags)
                 for seed in seeds for panel, (preset, env_steps) in panels.items()
                 for label, flags in settings)


MINATAR_PRESETS = {f"MinAtar/{game}-v1": (preset, 5_000_000) for game, preset in (
    ("Asterix", "minatar-asterix"), ("Breakout", "minatar-breakout"),
    ("Freeway", "minatar-freeway"), ("Seaquest", "minatar-seaquest"),
    ("SpaceInvaders", "minatar-space-invaders"))}
CONTINUOUS_PRESETS = {
    "Pendulum-v1": ("pendulum", 500_000),
    "LunarLanderContinuous-v3": ("lunarlander-continuous", 2_000_000),
    "HalfCheetah-v5": ("halfcheetah", 3_000_000),
    "Hopper-v5": ("hopper", 2_000_000),
}
LAG_GAMES = ("MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1")
LAG_ENV_STEPS = 1_000_000
DEFAULT = setting("vtrace", NATURAL)

PLANS = {plan.name: plan for plan in (
    Plan("minatar", "MinAtar, five games",
         grid_runs(MINATAR_PRESETS, [DEFAULT]),
         references.MINATAR, references.MINATAR_GOALS),
    Plan("continuous", "Continuous control",
         grid_runs(CONTINUOUS_PRESETS, [DEFAULT])
         + grid_runs({"HalfCheetah-v5": CONTINUOUS_PRESETS["HalfCheetah-v5"]},
                     [setting(c, lag) for lag in (NATURAL, 16)
                      for c in ("vtrace", "none")]),
         references.CONTINUOUS, references.CONTINUOUS_GOALS),
    Plan("minatar-lag", "MinAtar, policy lag",
         grid_runs({game: (MINATAR_PRESETS[game][0], LAG_ENV_STEPS)
                    for game in LAG_GAMES},
                   [setting(c, lag) for lag in (0, 16, 64)
                    for c in ("vtrace", "none")]),
         references.MINATAR),
    Plan("quick", "CartPole, quick",
         grid_runs({"CartPole-v1": ("cartpole", 4_800)},
                   [(DEFAULT[0], DEFAULT[1] + (
                       "--num-envs", "8", "--unroll-length", "10",
                       "--checkpoint-every", "4", "--jit-compile", "false"))],
                   seeds=(0, 1)),
         goals=references.CARTPOLE_GOALS),
)}
