"""Importing tf_vtrace runs no TensorFlow op: a process that imports it
can still configure devices and build a MultiWorkerMirroredStrategy, which
TensorFlow allows only before its runtime starts (a module-level
`tf.constant` once broke the multi-worker learner)."""
import subprocess
import sys

from tolerances import SUBPROCESS_TIMEOUT_S

PROGRAM = """
import tensorflow as tf
import tf_vtrace, tf_vtrace.keras, tf_vtrace.export, tf_vtrace.layout
import tf_vtrace.agent.train, tf_vtrace.agent.evaluate, tf_vtrace.agent.learner
# Raises RuntimeError once the runtime is initialized.
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
print("OK")
"""


def test_importing_the_library_leaves_the_runtime_unstarted():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True,
                            text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]
