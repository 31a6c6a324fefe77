"""tf_vtrace: V-trace (IMPALA) off-policy targets for TensorFlow 2 and Keras.

The core (`tf_vtrace.vtrace`) follows the API of the scalable_agent / RLlib
V-trace modules, so ported code only changes its import. The IMPALA loss
(`tf_vtrace.impala`), its Keras face (`tf_vtrace.keras`) and the SavedModel
module (`tf_vtrace.export`) are built on it.
"""

# First: TensorFlow's start-up log lines held to TF_CPP_MIN_LOG_LEVEL. Under
# ``python -m tf_vtrace.agent`` TensorFlow waits for a command that needs it
# (``--help`` and usage errors answer without it); the public names then
# load at first use.
from tf_vtrace import _startup_log

if _startup_log.defers_tensorflow():
    def __getattr__(name):
        """A public name, imported at its first use."""
        if name in __all__:
            import importlib
            _startup_log.import_tensorflow()
            for module in ("vtrace", "impala", "keras", "export", "layout"):
                module = importlib.import_module(f"tf_vtrace.{module}")
                if name in module.__dict__:
                    globals()[name] = module.__dict__[name]
                    return globals()[name]
        raise AttributeError(f"module 'tf_vtrace' has no attribute {name!r}")
else:
    _startup_log.import_tensorflow()
    from tf_vtrace.export import VTraceModule, export_policy
    from tf_vtrace.impala import VTraceTargets, impala_loss, vtrace_targets
    from tf_vtrace.keras import (
        ImpalaLoss,
        ImpalaMetric,
        VTrace,
        impala_metrics,
        pack_targets,
        unpack_predictions,
        unpack_targets,
    )
    from tf_vtrace.layout import make_time_major
    from tf_vtrace.vtrace import (
        VTraceFromLogitsReturns,
        VTraceReturns,
        from_importance_weights,
        from_logits,
        get_log_rhos,
        log_probs_from_logits_and_actions,
        multi_from_logits,
        multi_log_probs_from_logits_and_actions,
    )

__version__ = "0.1.0"

__all__ = [
    # V-trace (the RLlib / scalable_agent API)
    "VTraceReturns",
    "VTraceFromLogitsReturns",
    "from_importance_weights",
    "from_logits",
    "multi_from_logits",
    "log_probs_from_logits_and_actions",
    "multi_log_probs_from_logits_and_actions",
    "get_log_rhos",
    # The IMPALA loss
    "VTraceTargets",
    "vtrace_targets",
    "impala_loss",
    # Keras
    "ImpalaLoss",
    "ImpalaMetric",
    "impala_metrics",
    "VTrace",
    "pack_targets",
    "unpack_targets",
    "unpack_predictions",
    # SavedModel
    "VTraceModule",
    "export_policy",
    # Layout (RLlib's flat batches)
    "make_time_major",
]
