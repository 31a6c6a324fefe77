"""Bad input never passes silently (issue 24): a hostile user's suite.

Every entry point (the core's three functions, `vtrace_targets`,
`impala_loss`) runs in four modes: eagerly, in a `tf.function`, in a caller's
`tf.function(jit_compile=True)` ("xla") and in a `tf.function` whose
`input_signature` leaves T and B unknown ("unknown"), with `validate_args`
off and on. Good input must give the float64 reference's numbers
(tests/vtrace_reference.py); bad input must raise naming the argument: a
ValueError where Python sees it (eagerly, or when traced for a static shape),
an InvalidArgumentError from the graph's assert, or, inside a caller's XLA
function where no op can raise, NaN outputs (and `validate_args=True` refused
when traced). One (T, B, A) throughout keeps the XLA compiles few.
"""
import numpy as np
import pytest
import tensorflow as tf

import tf_vtrace
from tests.tolerances import assert_close_to_rounding
from tests.vtrace_reference import categorical_log_probs, vtrace_reference
from tf_vtrace.impala import impala_loss, vtrace_targets

T, B, A = 5, 3, 4
MODES = ("eager", "function", "xla", "unknown")
RHO_BAR, LAMBDA = 1.3, 0.9


def make_batch(seed=0):
    """Off-policy data whose ratios clip both ways, with terminal steps."""
    rng = np.random.default_rng(seed)
    discounts = np.full([T, B], 0.9, np.float32)
    discounts[2, 0] = 0.0  # A terminal step cuts the traces.
    return dict(
        behaviour_policy_logits=rng.normal(0, 1.5, [T, B, A]).astype(np.float32),
        target_policy_logits=rng.normal(0, 1.5, [T, B, A]).astype(np.float32),
        actions=rng.integers(0, A, [T, B]).astype(np.int32),
        discounts=discounts,
        rewards=rng.normal(0, 1, [T, B]).astype(np.float32),
        values=rng.normal(0, 1, [T, B]).astype(np.float32),
        bootstrap_value=rng.normal(0, 1, [B]).astype(np.float32))


def reference(batch):
    log_rhos = (categorical_log_probs(batch["target_policy_logits"], batch["actions"])
                - categorical_log_probs(batch["behaviour_policy_logits"],
                                        batch["actions"]))
    vs, pg = vtrace_reference(log_rhos, batch["discounts"], batch["rewards"],
                              batch["values"], batch["bootstrap_value"],
                              clip_rho_threshold=RHO_BAR, lambda_=LAMBDA)
    return log_rhos, vs, pg


def reference_loss(batch):
    """Σ −log π(a)·A + 0.5 · ½ Σ (vs − V)² (entropy_cost 0, reduction sum)."""
    log_rhos, vs, pg = reference(batch)
    log_pi = categorical_log_probs(batch["target_policy_logits"], batch["actions"])
    return np.sum(-log_pi * pg) + 0.25 * np.sum((vs - batch["values"]) ** 2)


# Each entry point: (batch of tensors, hyperparameters, validate_args) -> one
# output tensor whose value the reference gives.
def _hyper(h):
    return dict(clip_rho_threshold=h.get("clip_rho_threshold", RHO_BAR),
                lambda_=h.get("lambda_", LAMBDA))


def _from_importance_weights(b, h, v):
    log_rhos = (tf_vtrace.log_probs_from_logits_and_actions(
        b["target_policy_logits"], b["actions"], validate_args=v)
        - tf_vtrace.log_probs_from_logits_and_actions(
            b["behaviour_policy_logits"], b["actions"], validate_args=v))
    return tf_vtrace.from_importance_weights(
        log_rhos, b["discounts"], b["rewards"], b["values"], b["bootstrap_value"],
        validate_args=v, **_hyper(h)).vs


def _from_logits(b, h, v):
    return tf_vtrace.from_logits(**b, validate_args=v, **_hyper(h)).vs


def _multi_from_logits(b, h, v):
    heads = {k: [b[k]] for k in ("behaviour_policy_logits", "target_policy_logits",
                                 "actions")}
    return tf_vtrace.multi_from_logits(**{**b, **heads}, validate_args=v,
                                       **_hyper(h)).vs


def _vtrace_targets(b, h, v):
    return vtrace_targets(**b, validate_args=v, **_hyper(h)).vs


def _impala_loss(b, h, v):
    return impala_loss(**b, entropy_cost=0.0, validate_args=v, **_hyper(h))[0]


ENTRIES = {"from_importance_weights": _from_importance_weights,
           "from_logits": _from_logits, "multi_from_logits": _multi_from_logits,
           "vtrace_targets": _vtrace_targets, "impala_loss": _impala_loss}


def _spec(value):
    """T and B unknown; the logits' axis (and any rank) as given."""
    shape = [None] * value.shape.rank
    if value.shape.rank == 3:
        shape[2] = value.shape[2]
    return tf.TensorSpec(shape, value.dtype)


def run(entry, mode, batch, hyper=None, validate_args=False):
    """`entry` on `batch` (numpy) in `mode`, hyperparameters `hyper` (tensors
    ride in the batch so that the graph modes take them as inputs)."""
    hyper = dict(hyper or {})
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    tensor_hyper = {k: v for k, v in hyper.items() if tf.is_tensor(v)}
    static_hyper = {k: v for k, v in hyper.items() if not tf.is_tensor(v)}

    def call(b, h):
        return ENTRIES[entry](b, {**static_hyper, **h}, validate_args)

    if mode == "eager":
        return call(tensors, tensor_hyper)
    if mode == "unknown":
        signature = [{k: _spec(v) for k, v in tensors.items()},
                     {k: tf.TensorSpec(v.shape, v.dtype) for k, v in tensor_hyper.items()}]
        return tf.function(call, input_signature=signature)(tensors, tensor_hyper)
    return tf.function(call, jit_compile=(mode == "xla"))(tensors, tensor_hyper)


def expected_value(entry, batch):
    if entry == "impala_loss":
        return reference_loss(batch)
    return reference(batch)[1]


# --- Good input: the reference's numbers everywhere --------------------------


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("validate_args", [False, True])
def test_good_input_matches_the_reference(entry, mode, validate_args):
    batch = make_batch()
    if mode == "xla" and validate_args:
        with pytest.raises(ValueError, match="validate_args=True.* XLA"):
            run(entry, mode, batch, validate_args=True)
        return
    out = run(entry, mode, batch, validate_args=validate_args).numpy()
    assert_close_to_rounding(out, expected_value(entry, batch), np.float32,
                             n_reduced=T * B if entry == "impala_loss" else T)


@pytest.mark.parametrize("entry", ["from_importance_weights", "impala_loss"])
def test_tensor_hyperparameters_match_the_reference(entry):
    batch = make_batch(1)
    out = run(entry, "function", batch, hyper=dict(
        lambda_=tf.constant(LAMBDA), clip_rho_threshold=tf.constant(RHO_BAR)))
    assert_close_to_rounding(out.numpy(), expected_value(entry, batch), np.float32,
                             n_reduced=T * B)


# --- Bad values: an error, or NaN where nothing can raise --------------------


def assert_rejected(entry, mode, batch, match, hyper=None, validate_args=False):
    """ValueError eagerly; the graph's assert in a tf.function; NaN in a
    caller's XLA function (no op raises there): everywhere for a bad tensor
    hyperparameter, where a bad action's NaN log-prob reaches otherwise."""
    if mode == "xla":
        out = run(entry, mode, batch, hyper, validate_args).numpy()
        nan = np.isnan(out)
        assert (np.all(nan) if hyper else np.any(nan)), out
        return
    error = ValueError if mode == "eager" else tf.errors.InvalidArgumentError
    with pytest.raises(error, match=match):
        run(entry, mode, batch, hyper, validate_args).numpy()


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e != "from_importance_weights"]
                         + ["from_importance_weights"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad_action", [A, -1, 10 ** 6])
def test_action_out_of_range(entry, mode, bad_action):
    batch = make_batch()
    batch["actions"][3, 1] = bad_action
    assert_rejected(entry, mode, batch, r"`actions` must be in \[0, P\)")


@pytest.mark.parametrize("entry", ["from_importance_weights", "vtrace_targets",
                                   "impala_loss"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,value", [("lambda_", 1.5), ("lambda_", -0.5),
                                        ("clip_rho_threshold", 0.0),
                                        ("clip_rho_threshold", -1.0)])
def test_tensor_hyperparameter_out_of_range(entry, mode, name, value):
    assert_rejected(entry, mode, make_batch(), f"`{name}`",
                    hyper={name: tf.constant(value)})


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("validate_args", [False, True])
def test_python_lambda_out_of_range(entry, validate_args):
    with pytest.raises(ValueError, match=r"`lambda_` must be in \[0, 1\]"):
        run(entry, "eager", make_batch(), hyper={"lambda_": 1.5},
            validate_args=validate_args)


def test_validate_args_is_refused_inside_a_callers_xla_function():
    with pytest.raises(ValueError, match="validate_args=True.* XLA"):
        run("from_logits", "xla", make_batch(), validate_args=True)


# --- The shape contract: one rule, every entry point -------------------------


def _reshaped(name, shape):
    def change(batch):
        batch[name] = np.zeros(shape, batch[name].dtype)
        return batch
    return change


SHAPE_CASES = {
    # name: (how the batch is broken, the argument the error names)
    "rewards T+1": (_reshaped("rewards", [T + 1, B]), "rewards"),
    "rewards T=1": (_reshaped("rewards", [1, B]), "rewards"),
    "rewards rank 1": (_reshaped("rewards", [T]), "rewards"),
    "bootstrap scalar": (_reshaped("bootstrap_value", []), "bootstrap_value"),
    "bootstrap [1]": (_reshaped("bootstrap_value", [1]), "bootstrap_value"),
    "logits T=1": (_reshaped("target_policy_logits", [1, B, A]), "target_policy_logits"),
    "logits B=1": (_reshaped("target_policy_logits", [T, 1, A]), "target_policy_logits"),
    "logits T+1": (_reshaped("target_policy_logits", [T + 1, B, A]),
                   "target_policy_logits"),
    "actions B=1": (_reshaped("actions", [T, 1]), "actions"),
    "actions T=1": (_reshaped("actions", [1, B]), "actions"),
    "behaviour A-1": (_reshaped("behaviour_policy_logits", [T, B, A - 1]),
                      "behaviour_policy_logits"),
}
LOGIT_ENTRIES = [e for e in ENTRIES if e != "from_importance_weights"]


def _shape_cases(entry):
    """The logits' cases for the core's own log-probs name `actions` (its
    log-prob function sees logits and actions, not `values`)."""
    return [(entry, case) for case in SHAPE_CASES
            if entry != "from_importance_weights" or SHAPE_CASES[case][1] in (
                "rewards", "bootstrap_value")]


@pytest.mark.parametrize("entry,case", [c for e in ENTRIES for c in _shape_cases(e)])
def test_static_shape_violation_names_the_argument(entry, case):
    change, name = SHAPE_CASES[case]
    with pytest.raises(ValueError, match=f"`{name}`"):
        run(entry, "eager", change(make_batch()))


@pytest.mark.parametrize("entry", ENTRIES)
def test_per_step_lambda_must_have_t_steps(entry):
    with pytest.raises(ValueError, match="`lambda_`"):
        run(entry, "eager", make_batch(), hyper={"lambda_": tf.ones([1, B])})


@pytest.mark.parametrize("entry", ENTRIES)
def test_zero_steps_is_a_clear_error(entry):
    batch = {k: v[:0] if k != "bootstrap_value" else v for k, v in make_batch().items()}
    with pytest.raises(ValueError, match="T = 0"):
        run(entry, "eager", batch)


@pytest.mark.parametrize("entry,case", [
    (e, c) for e in ENTRIES for c in ("rewards T+1", "rewards T=1", "logits B=1",
                                      "actions T=1") if (e, c) in _shape_cases(e)])
def test_unknown_dims_are_checked_at_run_time(entry, case):
    """T and B unknown when traced: the sizes are asserted when it runs."""
    change, name = SHAPE_CASES[case]
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"`{name}"):
        run(entry, "unknown", change(make_batch()))


@pytest.mark.parametrize("mode", ["eager", "unknown"])
def test_unknown_zero_steps(mode):
    batch = {k: v[:0] if k != "bootstrap_value" else v for k, v in make_batch().items()}
    error = ValueError if mode == "eager" else tf.errors.InvalidArgumentError
    with pytest.raises(error, match="T >= 1|T = 0"):
        run("from_logits", mode, batch)


# --- Edges of the mask -------------------------------------------------------


@pytest.mark.parametrize("jit_compile", [False, True])
def test_nan_padding_after_a_terminal_step_stays_out(jit_compile):
    """Padding marked with NaN everywhere (values, rewards, logits, bootstrap):
    masked steps must not reach the loss or its gradient, even where the step
    before the padding is terminal (γ = 0 multiplies the padded V by 0)."""
    batch = make_batch(2)
    mask = np.ones([T, B], bool)
    mask[3:, 0] = False
    batch["discounts"][2, 0] = 0.0  # Terminal right before the padding.
    mask[:, 1] = True
    mask[4:, 2] = False  # The last step padded: the bootstrap is not read ...
    batch["bootstrap_value"][2] = np.nan
    for key in ("values", "rewards", "discounts"):
        batch[key][~mask] = np.nan
    batch["values"][4, 2] = 0.5  # ... but V(x_4), step 3's next value, is.
    for key in ("target_policy_logits", "behaviour_policy_logits"):
        batch[key][~mask] = np.nan
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    with tf.GradientTape() as tape:
        tape.watch([tensors["target_policy_logits"], tensors["values"]])
        loss, _ = impala_loss(**tensors, mask=mask, jit_compile=jit_compile)
    gradients = tape.gradient(loss, [tensors["target_policy_logits"], tensors["values"]])
    assert np.isfinite(loss.numpy())
    clean = {k: np.where(np.isnan(v), 0, v) for k, v in batch.items()}
    clean_loss, _ = impala_loss(**clean, mask=mask, jit_compile=jit_compile)
    assert loss.numpy() == clean_loss.numpy()  # NaN or 0 padding: the same loss.
    for gradient in gradients:
        assert np.all(np.isfinite(gradient.numpy()))


# --- The Keras faces ---------------------------------------------------------


def _keras_fit_setup(bad_action=None):
    from tf_vtrace.keras import ImpalaLoss, keras, pack_targets
    batch = make_batch(3)
    actions = batch["actions"].T.copy()
    if bad_action is not None:
        actions[1, 2] = bad_action
    y_true = pack_targets(actions, batch["rewards"].T, batch["discounts"].T,
                          np.transpose(batch["behaviour_policy_logits"], [1, 0, 2]))
    keras.utils.set_random_seed(0)
    obs = keras.Input((T + 1, 2))
    model = keras.Model(obs, keras.layers.Dense(A + 1)(obs))
    observations = np.random.default_rng(0).normal(size=(B, T + 1, 2)).astype(np.float32)
    return model, ImpalaLoss, keras, observations, y_true


def test_fit_refuses_sample_weight():
    model, ImpalaLoss, keras, obs, y_true = _keras_fit_setup()
    model.compile("sgd", loss=ImpalaLoss())
    with pytest.raises(ValueError, match="`sample_weight`"):
        model.fit(obs, y_true, sample_weight=np.ones(B), batch_size=B, verbose=0)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_fit_with_an_action_out_of_range(jit_compile):
    """Without XLA the step raises naming `actions`; in an XLA-compiled step
    (nothing raises there) the loss is NaN and the weights stay finite."""
    model, ImpalaLoss, keras, obs, y_true = _keras_fit_setup(bad_action=A)
    model.compile("sgd", loss=ImpalaLoss(), jit_compile=jit_compile)
    if not jit_compile:
        with pytest.raises(tf.errors.InvalidArgumentError, match="`actions` must be"):
            model.fit(obs, y_true, batch_size=B, verbose=0)
        return
    history = model.fit(obs, y_true, batch_size=B, verbose=0).history
    assert np.isnan(history["loss"][0])
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())


def test_keras_file_with_lambda_out_of_range_does_not_load(tmp_path):
    import json
    import zipfile
    model, ImpalaLoss, keras, _, _ = _keras_fit_setup()
    model.compile("sgd", loss=ImpalaLoss(lambda_=0.5))
    path, bad = tmp_path / "m.keras", tmp_path / "bad.keras"
    model.save(path)
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(bad, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                text = json.dumps(json.loads(data))
                assert '"lambda_": 0.5' in text
                data = text.replace('"lambda_": 0.5', '"lambda_": 5.0').encode()
            target.writestr(item, data)
    with pytest.raises(ValueError, match=r"`lambda_` must be in \[0, 1\]"):
        keras.saving.load_model(bad)


@pytest.mark.parametrize("name,value", [("lambda_", 1.5), ("clip_rho_threshold", -1.0),
                                        ("alpha_", 2.0)])
def test_keras_faces_check_hyperparameters(name, value):
    from tf_vtrace.export import VTraceModule
    from tf_vtrace.keras import ImpalaLoss, VTrace
    for face in (ImpalaLoss, VTrace, VTraceModule):
        with pytest.raises(ValueError, match=f"`{name}`"):
            face(**{name: value})


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_vtrace_layer_computes_in_float32_under_mixed_precision(policy):
    """Half in, float32 math: the layer's float32 data are not autocast."""
    from tf_vtrace.keras import VTrace, keras
    steps, rng = 100, np.random.default_rng(4)
    rewards = rng.normal(100, 10, [1, steps]).astype(np.float32)
    discounts = np.full([1, steps], 0.99, np.float32)
    values = rng.normal(0, 1, [1, steps + 1]).astype(np.float32)
    logits = np.zeros([1, steps, 2], np.float32)
    keras.mixed_precision.set_global_policy(policy)
    try:
        out = VTrace()(logits, logits, np.zeros([1, steps], np.int32), discounts,
                       rewards, values)["vs"]
    finally:
        keras.mixed_precision.set_global_policy("float32")
    expected, _ = vtrace_reference(np.zeros([steps, 1]), discounts.T, rewards.T,
                                   values[:, :-1].T, values[:, -1])
    assert_close_to_rounding(np.asarray(out, np.float64).T, expected, np.float32,
                             n_reduced=steps)


def test_vtrace_layer_values_must_cover_t_plus_1():
    from tf_vtrace.keras import VTrace
    b = make_batch()
    with pytest.raises(ValueError, match="T \\+ 1"):
        VTrace(time_major=True)(b["behaviour_policy_logits"], b["target_policy_logits"],
                                b["actions"], b["discounts"], b["rewards"], b["values"])


# --- A schedule of Python numbers compiles once ------------------------------


def test_annealed_python_hyperparameters_compile_once():
    """A new Python-number λ, ρ̄ or cost each call is an input of the compiled
    call, not a new constant: no new kernel, no new fused loss, no retrace;
    and each value still gives the reference's numbers."""
    from tf_vtrace import _fused, _kernel_cache
    batch = make_batch(5)
    tensors = {k: tf.constant(v) for k, v in batch.items()}
    for step in range(3):  # Warm: the first values compile.
        impala_loss(**tensors, lambda_=0.5 + step / 100, entropy_cost=0.01 + step)
        run("from_logits", "eager", batch, hyper={"lambda_": 0.5 + step / 100})
    kernels = _kernel_cache.concrete_kernel.cache_info()
    losses = _fused._compiled_loss_sums.cache_info()
    for step in range(10):
        value = 0.6 + step / 37
        out = run("from_logits", "eager", batch, hyper={
            "lambda_": value, "clip_rho_threshold": 1 + value}).numpy()
        log_rhos = reference(batch)[0]
        expected, _ = vtrace_reference(
            log_rhos, batch["discounts"], batch["rewards"], batch["values"],
            batch["bootstrap_value"], clip_rho_threshold=1 + value, lambda_=value)
        assert_close_to_rounding(out, expected, np.float32, n_reduced=T)
        impala_loss(**tensors, lambda_=value, entropy_cost=value, kl_cost=value,
                    clip_c_threshold=value)
    # One more kernel at most (ρ̄ and λ as inputs together: a new kind).
    assert _kernel_cache.concrete_kernel.cache_info().misses <= kernels.misses + 2
    assert _fused._compiled_loss_sums.cache_info().misses <= losses.misses + 2


# --- The SavedModel module ---------------------------------------------------


@pytest.mark.parametrize("change,match", [
    ("bad_action", r"`actions` must be in \[0, P\)"),
    ("rewards T+1", "`rewards`"),
])
def test_saved_model_module_rejects_bad_input(tmp_path, change, match):
    """Unknown T and B in its signatures: the checks run in the saved graph,
    and still after a reload."""
    from tf_vtrace.export import VTraceModule
    module = VTraceModule()
    tf.saved_model.save(module, str(tmp_path), signatures=module.signatures())
    loaded = tf.saved_model.load(str(tmp_path))
    batch = make_batch()
    if change == "bad_action":
        batch["actions"][0, 0] = A
    else:
        batch["rewards"] = np.zeros([T + 1, B], np.float32)
    ones = np.ones([T, B], np.float32)
    args = dict(batch, mask=ones, truncated=0 * ones, truncation_values=0 * ones)
    args = {k: tf.constant(v) for k, v in args.items()}
    for function in (module.loss, loaded.loss):
        with pytest.raises(tf.errors.InvalidArgumentError, match=match):
            function(**args)
