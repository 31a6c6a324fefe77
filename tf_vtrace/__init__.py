"""tf_vtrace: V-trace (IMPALA) off-policy targets for TensorFlow 2 and Keras.

The core (`tf_vtrace.vtrace`) follows the API of the scalable_agent / RLlib
V-trace modules, so ported code only changes its import.
"""

from tf_vtrace.vtrace import VTraceFromLogitsReturns
from tf_vtrace.vtrace import VTraceReturns
from tf_vtrace.vtrace import from_importance_weights
from tf_vtrace.vtrace import from_logits
from tf_vtrace.vtrace import get_log_rhos
from tf_vtrace.vtrace import log_probs_from_logits_and_actions
from tf_vtrace.vtrace import multi_from_logits
from tf_vtrace.vtrace import multi_log_probs_from_logits_and_actions

__version__ = "0.1.0"

__all__ = [
    "VTraceReturns",
    "VTraceFromLogitsReturns",
    "from_importance_weights",
    "from_logits",
    "multi_from_logits",
    "log_probs_from_logits_and_actions",
    "multi_log_probs_from_logits_and_actions",
    "get_log_rhos",
]
