"""Named configurations for the CLI's ``--preset`` (flags given after it win).

* ``cartpole``: the `Config` defaults (CartPole-v1, 300k env steps, RMSProp).
* ``acrobot``: Acrobot-v1 (reward −1 per step until the tip swings above the
  bar, 500-step limit): the defaults' MLP, 32 envs × 20 steps, Adam 1e-3,
  500k env steps.
* ``minatar-breakout`` (and ``-space-invaders``, ``-freeway``, ``-asterix``,
  ``-seaquest``): MinAtar games (the `minatar` extra, its v1 envs with
  sticky actions) with `networks.grid_cnn`, 5M env steps as in the MinAtar
  paper's baselines (Young & Tian 2019), 32 envs × 5 steps (an update every
  160 env steps), Adam 1e-3 decayed to 0, entropy cost 0.01, γ 0.99,
  rewards as given (MinAtar's are 0/1 already); chosen on Breakout at 1M
  env steps (docs/records/minatar-sweep.md).
* ``stateless-cartpole``: the memory task ``tf_vtrace/StatelessCartPole-v0``
  (position and angle only) with the LSTM core and a separate value
  pathway (`Config.separate_value_core`), the value loss weighted 0.01
  (as RLlib's StatelessCartPole examples, ``vf_loss_coeff=0.01``), 32 envs ×
  20 steps, 1M env steps, Adam 2e-3.

* ``pendulum``, ``lunarlander-continuous``, ``halfcheetah``, ``hopper``:
  Box actions (a diagonal Gaussian, log-std one learned vector) on
  Pendulum-v1 (500k env steps), LunarLanderContinuous-v3 (box2d, 2M),
  HalfCheetah-v5 and Hopper-v5 (the `mujoco` extra; 3M and 2M), with
  observation normalisation and reward scaling on
  (`Config.normalize_observations`, `Config.scale_rewards`), as every
  reference PPO has. From CleanRL's ``ppo_continuous_action`` (Adam 3e-4,
  γ 0.99, entropy cost 0, value loss weight 0.5, gradient norm 0.5, two
  tanh layers of 64) adapted to one IMPALA update per unroll: 16 envs ×
  32 steps per update. Pendulum takes the Stable-Baselines3 zoo's tuned
  γ 0.9, and Adam 1e-3 and 16 × 8 steps from the sweep in
  docs/records/continuous-sweep.md;
  LunarLanderContinuous the zoo's γ 0.999 and entropy cost 0.01. Only
  Pendulum's settings were swept.

All but ``cartpole`` start from `PRESET_BASE`.
"""

__all__ = ["CONTINUOUS_BASE", "DEFAULTS_AS_MEASURED", "PRESETS", "PRESET_BASE"]

# What every preset but ``cartpole`` pins, whatever `Config`'s defaults:
# Adam, the gradient clipped to norm 0.5, a queue of one unroll.
PRESET_BASE = dict(optimizer="adam", max_grad_norm=0.5, queue_size=1)
# The former name of `PRESET_BASE`.
DEFAULTS_AS_MEASURED = PRESET_BASE
_MINATAR = dict(PRESET_BASE, num_envs=32, unroll_length=5,
                total_env_steps=5_000_000, learning_rate=1e-3,
                entropy_cost=0.01, discount=0.99)

# The continuous presets' common settings (see the module doc).
CONTINUOUS_BASE = dict(PRESET_BASE, normalize_observations=True,
                       scale_rewards=True, learning_rate=3e-4,
                       entropy_cost=0., baseline_cost=0.5, discount=0.99,
                       num_envs=16, unroll_length=32)

PRESETS = {
    "cartpole": {},
    "acrobot": dict(PRESET_BASE, env_id="Acrobot-v1", num_envs=32,
                    learning_rate=1e-3, total_env_steps=500_000),
    **{f"minatar-{name}": dict(_MINATAR, env_id=f"MinAtar/{game}-v1")
       for name, game in (("breakout", "Breakout"),
                          ("space-invaders", "SpaceInvaders"),
                          ("freeway", "Freeway"), ("asterix", "Asterix"),
                          ("seaquest", "Seaquest"))},
    "stateless-cartpole": dict(
        PRESET_BASE, learning_rate=2e-3,
        env_id="tf_vtrace/StatelessCartPole-v0", core="lstm",
        separate_value_core=True, baseline_cost=0.01, num_envs=32,
        total_env_steps=1_000_000),
    "pendulum": dict(CONTINUOUS_BASE, env_id="Pendulum-v1", discount=0.9,
                     learning_rate=1e-3, unroll_length=8,
                     total_env_steps=500_000),
    "lunarlander-continuous": dict(
        CONTINUOUS_BASE, env_id="LunarLanderContinuous-v3", discount=0.999,
        entropy_cost=0.01, total_env_steps=2_000_000),
    "halfcheetah": dict(CONTINUOUS_BASE, env_id="HalfCheetah-v5",
                        total_env_steps=3_000_000),
    "hopper": dict(CONTINUOUS_BASE, env_id="Hopper-v5",
                   total_env_steps=2_000_000),
}
