"""An IMPALA agent built on tf_vtrace: actors, learner, training loop, CLI.

One concept per module:

* `config`: the validated `Config` dataclass;
* `envs`: gymnasium vector envs with same-step auto-reset (discrete,
  multi-discrete, Atari);
* `networks`: Keras 3 MLP and Nature CNN, observations → (logits, value);
* `actor`: the engine-neutral unroll contract and the in-process actor;
* `policy_lag`: the weights handed to the actor, `policy_lag` updates old;
* `learner`: one update per unroll with `tf_vtrace.impala_loss` (up to
  `Config.updates_per_call` of them in one compiled call);
* `recording`: episodes CSV, TensorBoard scalars, the learning-curve PNG;
* `train`: the loop; `evaluate`: play an exported SavedModel.

Run it with ``python -m tf_vtrace.agent train --out runs/demo``. Needs the
`agent` extra (gymnasium, matplotlib, tensorboard, tqdm); Atari also `atari`.
`import tf_vtrace` never imports this package.
"""

from tf_vtrace.agent.config import Config

__all__ = ["Config"]
