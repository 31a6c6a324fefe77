"""The run-time checks in a TF1 graph run by a `tf.compat.v1.Session` (how
scalable_agent's learner runs): the outputs wait on the asserts, so a bad
value raises instead of giving NaN. TF1 behaviour (`disable_eager_execution`)
holds for the whole process, so this runs in a subprocess."""
import os
import subprocess
import sys
import textwrap

from tolerances import SUBPROCESS_TIMEOUT_S

TESTS = os.path.dirname(os.path.abspath(__file__))

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    import tf_vtrace

    T, B, A, LAMBDA = 3, 2, 4, 0.5
    placeholder = tf.compat.v1.placeholder
    logits = placeholder(tf.float32, [None, None, A])
    actions = placeholder(tf.int32, [None, None])
    rewards = placeholder(tf.float32, [None, None])
    lambda_ = placeholder(tf.float32, [])
    steps = dict(discounts=tf.ones([T, B]), rewards=rewards,
                 values=tf.zeros([T, B]), bootstrap_value=tf.zeros([B]))
    vtrace = tf_vtrace.from_logits(logits, logits, actions, **steps, lambda_=lambda_)
    loss, _ = tf_vtrace.impala_loss(logits, logits, actions, **steps, lambda_=lambda_)
    good = {logits: np.zeros([T, B, A]), actions: np.zeros([T, B]),
            rewards: np.ones([T, B]), lambda_: LAMBDA}
    bad = {"action out of range": ({actions: np.full([T, B], A)},
                                   "`actions` must be in [0, P)"),
           "lambda_ = 1.5": ({lambda_: 1.5}, "`lambda_` (a tensor) must be in [0, 1]"),
           "rewards T + 1": ({rewards: np.ones([T + 1, B])}, "`rewards` must have")}
    with tf.compat.v1.Session() as session:
        # On-policy, γ = 1, r = 1, V = 0: vs_t = Σ_k λ^k over the T - t steps left.
        vs, value = session.run([vtrace.vs, loss], good)
        want = [(1 - LAMBDA ** (T - t)) / (1 - LAMBDA) for t in range(T)]
        np.testing.assert_allclose(vs[:, 0], want, rtol=1e-6)
        assert np.isfinite(value)
        for case, (feed, message) in bad.items():
            for fetch in (vtrace.vs, loss):
                try:
                    got = session.run(fetch, {**good, **feed})
                except tf.errors.InvalidArgumentError as error:
                    assert message in error.message, (case, error.message)
                else:
                    sys.exit(f"{case}: no error, got {got}")
    print("GRAPH_MODE_OK")
""")


def test_checks_are_enforced_in_a_tf1_session():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join(
                   [os.path.dirname(TESTS), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=TESTS, env=env,
                            capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT_S)
    assert "GRAPH_MODE_OK" in result.stdout, result.stdout + result.stderr
    # Every assert has a consumer: TF logs none as never used.
    assert "never used" not in result.stderr, result.stderr
