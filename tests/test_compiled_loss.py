"""`impala_loss` as one compiled call against its uncompiled self, in float64.

With the default Categorical heads and tensor inputs, the loss runs as one
XLA function that also returns the gradient, handed back by a custom
gradient. These tests pin that the loss, the diagnostics and the gradients
with respect to the target logits and the values equal those of the
uncompiled path (`jit_compile=False`, TensorFlow's own autodiff through
plain ops), in every context a caller differentiates in, and that the call
really is one compiled function.
"""
import numpy as np
import pytest
import tensorflow as tf
from tolerances import rtol_for

from tf_vtrace.impala import impala_loss

T, B = 9, 4
HEADS = (3, 2)
RTOL, ATOL = 1e-10, 1e-12


def make_inputs(seed=0, heads=HEADS, dtype=tf.float64, time_major=True):
    rng = np.random.default_rng(seed)
    shape = (T, B)

    def sequence(array):
        array = np.asarray(array)
        return tf.constant(array if time_major else np.swapaxes(array, 0, 1))

    actions = [(np.arange(T * B).reshape(shape) % p).astype(np.int32) for p in heads]
    inputs = dict(
        behaviour_policy_logits=[sequence(rng.normal(0, 2, shape + (p,))) for p in heads],
        target_policy_logits=[sequence(rng.normal(0, 2, shape + (p,))) for p in heads],
        actions=[sequence(a) for a in actions],
        discounts=sequence(np.where(rng.random(shape) < 0.15, 0., 0.9)),
        rewards=sequence(rng.normal(size=shape)),
        values=sequence(rng.normal(size=shape)),
        bootstrap_value=tf.constant(rng.normal(size=(B,))),
        mask=sequence(np.arange(T)[:, None] < np.array([T, 6, 3, 8])),
        truncated=sequence(rng.random(shape) < 0.1),
        truncation_values=sequence(rng.normal(size=shape)))
    return {k: tf.nest.map_structure(lambda t: tf.cast(t, dtype) if t.dtype.is_floating
                                     else t, v) for k, v in inputs.items()}


OPTION_CASES = [
    dict(),
    dict(reduction="mean", kl_cost=0.1, entropy_cost=0.01, lambda_=0.7),
    dict(reduction="masked_mean", pg_target="lambda_returns", lambda_=0.6,
         clip_rho_threshold=1.5, clip_pg_rho_threshold=2.0, clip_c_threshold=0.8),
    dict(clip_rho_threshold=None, clip_c_threshold=None, kl_cost=0.3,
         baseline_cost=0.25, lambda_=tf.constant(0.9, tf.float64)),
    dict(alpha_=0.3, clip_rho_threshold=1.2, clip_pg_rho_threshold=0.9,
         pg_target="lambda_returns", scan="associative"),
]


def loss_and_gradients(inputs, **options):
    """Loss, diagnostics and d loss / d (π's logits, V), eagerly under a tape."""
    differentiable = tf.nest.flatten(inputs["target_policy_logits"]) + [inputs["values"]]
    with tf.GradientTape() as tape:
        tape.watch(differentiable)
        loss, diagnostics = impala_loss(**inputs, **options)
    return loss, diagnostics, tape.gradient(loss, differentiable)


def assert_same(compiled, uncompiled):
    loss, diagnostics, gradients = compiled
    ref_loss, ref_diagnostics, ref_gradients = uncompiled
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL)
    for key, value in ref_diagnostics.items():
        np.testing.assert_allclose(float(diagnostics[key]), float(value), rtol=RTOL,
                                   atol=ATOL, err_msg=key)
    for gradient, reference in zip(gradients, ref_gradients):
        assert np.any(reference.numpy() != 0)  # or the comparison proves nothing
        np.testing.assert_allclose(gradient.numpy(), reference.numpy(), rtol=RTOL,
                                   atol=ATOL)


@pytest.mark.parametrize("options", OPTION_CASES)
@pytest.mark.parametrize("time_major", [True, False])
def test_compiled_loss_and_gradients_equal_uncompiled(options, time_major):
    inputs = make_inputs(time_major=time_major)
    assert_same(loss_and_gradients(inputs, time_major=time_major, **options),
                loss_and_gradients(inputs, time_major=time_major, jit_compile=False,
                                   **options))


def test_precomputed_behaviour_log_probs():
    inputs = make_inputs(seed=1)
    reference = loss_and_gradients(inputs, jit_compile=False, kl_cost=0.1)
    inputs["behaviour_action_log_probs"] = [
        tf.gather(tf.nn.log_softmax(logits), a, axis=-1, batch_dims=2) for logits, a in
        zip(inputs["behaviour_policy_logits"], inputs["actions"])]
    options = dict(kl_cost=0.1)
    assert_same(loss_and_gradients(dict(inputs, behaviour_policy_logits=None), **options),
                loss_and_gradients(dict(inputs, behaviour_policy_logits=None),
                                   jit_compile=False, **options))
    assert np.isfinite(float(reference[0]))


def test_inside_plain_and_jit_tf_functions_and_tf_gradients():
    inputs = make_inputs(seed=2)
    options = dict(reduction="masked_mean", kl_cost=0.1, lambda_=0.8)
    reference = loss_and_gradients(inputs, jit_compile=False, **options)
    names = sorted(inputs)

    def step(*flat):
        return loss_and_gradients(dict(zip(names, flat)), **options)

    flat = [inputs[name] for name in names]
    for jit_compile in (False, True):
        assert_same(tf.function(step, jit_compile=jit_compile)(*flat), reference)

    @tf.function
    def symbolic(*flat):  # tf.gradients, no tape: the forward-only compiled call
        args = dict(zip(names, flat))
        loss, diagnostics = impala_loss(**args, **options)
        differentiable = tf.nest.flatten(args["target_policy_logits"]) + [args["values"]]
        return loss, diagnostics, tf.gradients(loss, differentiable)

    assert_same(symbolic(*flat), reference)


def test_variables_receive_the_gradient():
    inputs = make_inputs(seed=3, heads=(4,))
    reference = loss_and_gradients(inputs, jit_compile=False)
    logits = tf.Variable(inputs["target_policy_logits"][0])
    values = tf.Variable(inputs["values"])
    with tf.GradientTape() as tape:
        loss, _ = impala_loss(**dict(inputs, target_policy_logits=logits, values=values))
    gradients = tape.gradient(loss, [logits, values])
    for gradient, expected in zip(gradients, reference[2]):
        np.testing.assert_allclose(gradient.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)


def test_half_precision_gradients_keep_the_input_dtype():
    inputs = make_inputs(seed=4, heads=(3,), dtype=tf.float32)
    half = dict(inputs, target_policy_logits=[tf.cast(inputs["target_policy_logits"][0],
                                                      tf.float16)],
                values=tf.cast(inputs["values"], tf.float16))
    loss, _, gradients = loss_and_gradients(half)
    ref_loss, _, ref_gradients = loss_and_gradients(half, jit_compile=False)
    assert loss.dtype == tf.float32
    assert [g.dtype for g in gradients] == [tf.float16, tf.float16]
    # Both compute in float32 (four signed terms per step over T·B steps)...
    np.testing.assert_allclose(float(loss), float(ref_loss),
                               rtol=rtol_for(np.float32, 4 * T * B + T))
    # ...and round each gradient to float16 once at the end: one float16 ulp
    # apart at most, where the float32 values straddle a rounding boundary.
    rtol = float(np.finfo(np.float16).eps) + rtol_for(np.float32, 4 * T * B + T)
    for gradient, reference in zip(gradients, ref_gradients):
        reference = reference.numpy().astype(np.float32)
        np.testing.assert_allclose(gradient.numpy().astype(np.float32), reference,
                                   rtol=rtol, atol=rtol * np.abs(reference).max())


def test_one_compiled_call_in_a_plain_tf_function():
    """The step's graph holds one function call, compiled with XLA; the
    backward pass is the custom gradient's two products, no second call."""
    inputs = make_inputs(seed=5, heads=(3,), dtype=tf.float32)
    names = sorted(inputs)

    @tf.function
    def step(*flat):
        return loss_and_gradients(dict(zip(names, flat)))

    graph = step.get_concrete_function(*[inputs[n] for n in names]).graph
    calls = [op for op in graph.get_operations() if "PartitionedCall" in op.type]
    assert len(calls) == 1
    function = graph._functions[calls[0].get_attr("f").name.decode()
                                if isinstance(calls[0].get_attr("f").name, bytes)
                                else calls[0].get_attr("f").name]
    assert function.definition.attr["_XlaMustCompile"].b


@pytest.mark.parametrize("jit_compile", [True, False])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_all_true_mask_equals_no_mask(jit_compile, dtype):
    """A mask that keeps every step changes nothing beyond rounding: the
    masked path (a bitwise selection over the logits' action axis, counts
    from the mask) is the identity there, in the loss, the diagnostics and
    both gradients. Masked and unmasked are two compiled programs, each for
    its exact shapes, whose reductions XLA may order differently (measured:
    one ulp apart), so the comparison is to rounding (tests/tolerances.py),
    scaled by the largest summand where a result may cancel."""
    inputs = make_inputs(seed=6, dtype=dtype)
    del inputs["mask"]
    options = dict(kl_cost=0.1, entropy_cost=0.01, jit_compile=jit_compile)
    n_reduced = 4 * T * B + T
    rtol = rtol_for(dtype.as_numpy_dtype, n_reduced)
    for mask in (tf.ones([T, B], tf.bool), tf.ones([T, B], dtype)):
        masked = loss_and_gradients(dict(inputs, mask=mask), **options)
        unmasked = loss_and_gradients(inputs, **options)
        np.testing.assert_allclose(masked[0].numpy(), unmasked[0].numpy(), rtol=rtol)
        for key, value in unmasked[1].items():
            np.testing.assert_allclose(masked[1][key].numpy(), value.numpy(),
                                       rtol=rtol, atol=rtol * abs(float(value)),
                                       err_msg=key)
        for gradient, reference in zip(masked[2], unmasked[2]):
            reference = reference.numpy()
            assert np.any(reference != 0)
            np.testing.assert_allclose(gradient.numpy(), reference, rtol=rtol,
                                       atol=rtol * np.max(np.abs(reference)))


# --- Traced per shape, never relaxed ------------------------------------------


def _sum_body(static, tensors):
    return (tf.reduce_sum(tensors["x"]),)


def test_compiled_functions_trace_each_known_shape():
    """The library's module-level XLA functions (the fused loss, the
    Categorical log-probs) give every fully known input shape an exact trace
    of its own: never one relaxed to unknown dimensions (`reduce_retracing`)
    nor one a symbolic caller traced with unknown dimensions. An agent
    learner's step that called such a trace recompiled its XLA program at
    every update (a TF profile: 0.30 s of XLA compilation in each 0.41 s
    update, MinAtar after CartPole; docs/performance.md). Here a symbolic
    trace comes first, then three new shapes: three exact traces."""
    from tf_vtrace import _fused, vtrace
    static = ("trace-per-shape",)
    unknown = tf.TensorSpec([None, None])

    @tf.function(input_signature=[unknown, tf.TensorSpec([None, None], tf.int32)])
    def symbolic(x, actions):  # Shapes unknown: the functions' other trace.
        logits = tf.stack([x] * 11, axis=-1)
        return (_fused.compiled_call(_sum_body, None, static, {"x": x}),
                vtrace.multi_log_probs_from_logits_and_actions([logits], [actions]))

    symbolic(tf.ones([3, 4]), tf.zeros([3, 4], tf.int32))
    exact_fused = _fused._compiled_loss_sums(_sum_body, None, static, False, True)
    exact_log_prob = vtrace._CATEGORICAL_LOG_PROB[True]
    log_prob_traces = exact_log_prob.experimental_get_tracing_count()
    for batch in (5, 6, 7):  # Shapes no other test uses.
        _fused.compiled_call(_sum_body, None, static, {"x": tf.ones([3, batch])})
        vtrace.multi_log_probs_from_logits_and_actions(
            [tf.zeros([3, batch, 11])], [tf.zeros([3, batch], tf.int32)])
    assert exact_fused.experimental_get_tracing_count() == 3
    assert exact_log_prob.experimental_get_tracing_count() == log_prob_traces + 3
    assert _fused._compiled_loss_sums(
        _sum_body, None, static, False, False).experimental_get_tracing_count() == 1


def test_eager_calls_of_two_shapes_match_the_traced_call():
    """Eagerly the compiled loss is called flat through a concrete function
    per structure and shapes; each of two shapes, called in turn, gets its
    own, and matches the same loss traced in a `tf.function`."""
    full = make_inputs(seed=5)
    short = {k: tf.nest.map_structure(lambda t: t[:5] if t.shape.rank >= 2
                                      else t, v) for k, v in full.items()}

    @tf.function(autograph=False)
    def traced(inputs):
        return loss_and_gradients(inputs, kl_cost=0.1, entropy_cost=0.01)

    for inputs in (full, short, full):
        assert_same(loss_and_gradients(inputs, kl_cost=0.1, entropy_cost=0.01),
                    traced(inputs))
