"""The choices of `Config`'s string fields, each with the module that
implements it (kept apart from `config` so that those modules can name them
without importing the configuration)."""

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
# `tf_vtrace.agent.envs.make_vector_env` implements VECTOR_ENVS.
VECTOR_ENVS = ("auto", "gymnasium", "numpy", "envpool")
