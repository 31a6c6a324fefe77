"""The functional IMPALA loss against an independent float64 numpy reference.

Inputs make clipping active (ratios both above and below the thresholds) and
sample every action, the last one included, so that sign or index mistakes in
the log-ratio (ray #4332) cannot pass.
"""
import numpy as np
import pytest
import tensorflow as tf
from vtrace_reference import categorical_log_probs, leaky_clip, vtrace_reference

from tf_vtrace.impala import impala_loss, vtrace_targets

T, B, A = 7, 4, 3


def _softmax(logits):
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _inputs(seed=0, t=T, b=B, a=A):
    rng = np.random.default_rng(seed)
    actions = np.arange(t * b).reshape(t, b) % a  # every action, the last too
    return dict(
        behaviour_policy_logits=rng.normal(0, 2, (t, b, a)),
        target_policy_logits=rng.normal(0, 2, (t, b, a)),
        actions=actions.astype(np.int32),
        discounts=np.where(rng.random((t, b)) < 0.1, 0., 0.9),
        rewards=rng.normal(size=(t, b)),
        values=rng.normal(size=(t, b)),
        bootstrap_value=rng.normal(size=(b,)))


def _reference(inp, baseline_cost=0.5, entropy_cost=0.01, kl_cost=0.1,
               reduction="sum", lambda_=1.0, pg_target="vs",
               clip_rho=1.0, clip_pg=1.0, clip_c=1.0, alpha_=1.0):
    """The loss terms in float64, time-major, from the paper's definitions."""
    log_pi = categorical_log_probs(inp["target_policy_logits"], inp["actions"])
    log_mu = categorical_log_probs(inp["behaviour_policy_logits"], inp["actions"])
    log_rhos = log_pi - log_mu
    vs, pg_adv = vtrace_reference(
        log_rhos, inp["discounts"], inp["rewards"], inp["values"],
        inp["bootstrap_value"], clip_rho, clip_pg, clip_c, lambda_, alpha_)
    values, boot = inp["values"], inp["bootstrap_value"]
    if pg_target == "lambda_returns":
        next_vs = np.concatenate([vs[1:], boot[None]])
        next_v = np.concatenate([values[1:], boot[None]])
        q = inp["rewards"] + inp["discounts"] * (
            lambda_ * next_vs + (1 - lambda_) * next_v)
        pg_adv = leaky_clip(np.exp(log_rhos), clip_pg, alpha_) * (q - values)
    pi = _softmax(inp["target_policy_logits"])
    mu = _softmax(inp["behaviour_policy_logits"])
    entropy = -(pi * np.log(pi)).sum(-1)
    kl = (mu * (np.log(mu) - np.log(pi))).sum(-1)
    terms = dict(
        policy_loss=-log_pi * pg_adv,
        baseline_loss=baseline_cost * 0.5 * (vs - values) ** 2,
        entropy_loss=-entropy_cost * entropy,
        kl_loss=kl_cost * kl)
    mask = np.ones_like(values)
    denominator = {"sum": 1., "mean": mask.size, "masked_mean": mask.sum()}[reduction]
    reduced = {k: (v * mask).sum() / denominator for k, v in terms.items()}
    stats = dict(
        mean_rho=np.exp(log_rhos).mean(), entropy=entropy.mean(), kl=kl.mean(),
        # Clipped means more than 0.1% (in log space) above the threshold.
        rho_clipped_fraction=(np.exp(log_rhos) > clip_rho * np.exp(1e-3)).mean(),
        c_clipped_fraction=(np.exp(log_rhos) > clip_c * np.exp(1e-3)).mean())
    return sum(reduced.values()), reduced, stats, vs, pg_adv


def _tf(inp, **kwargs):
    return impala_loss(**{k: tf.constant(v) for k, v in inp.items()}, **kwargs)


PER_STEP_LAMBDA = np.linspace(0.3, 1.0, T)[:, None] * np.ones((1, B))


@pytest.mark.parametrize("reduction", ["sum", "mean", "masked_mean"])
@pytest.mark.parametrize("pg_target,lambda_", [
    ("vs", 1.0), ("vs", 0.6), ("lambda_returns", 0.6),
    ("lambda_returns", PER_STEP_LAMBDA)])
def test_loss_terms_match_reference(reduction, pg_target, lambda_):
    inp = _inputs()
    costs = dict(baseline_cost=0.5, entropy_cost=0.01, kl_cost=0.1)
    loss, diags = _tf(inp, reduction=reduction, pg_target=pg_target,
                      lambda_=lambda_, clip_rho_threshold=1.0,
                      clip_pg_rho_threshold=1.5, clip_c_threshold=0.8, **costs)
    ref_loss, ref_terms, stats, _, _ = _reference(
        inp, reduction=reduction, pg_target=pg_target, lambda_=lambda_,
        clip_rho=1.0, clip_pg=1.5, clip_c=0.8, **costs)
    # Clipping is active in both directions, or the test could not fail.
    assert 0.2 < stats["rho_clipped_fraction"] < 0.8
    assert loss.dtype == tf.float64
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-10)
    for key, value in ref_terms.items():
        np.testing.assert_allclose(float(diags[key]), value, rtol=1e-10,
                                   atol=1e-12, err_msg=key)
    for key, value in stats.items():
        np.testing.assert_allclose(float(diags[key]), value, rtol=1e-10,
                                   err_msg=key)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_without_diagnostics_the_loss_and_gradients_are_the_same(jit_compile):
    # with_diagnostics=False changes what is returned beside the loss, not
    # the loss or its gradient (eager and in a plain tf.function), with the
    # KL term on so that its computation cannot be skipped.
    inp = _inputs()
    costs = dict(baseline_cost=0.5, entropy_cost=0.01, kl_cost=0.1,
                 clip_rho_threshold=1.0, clip_c_threshold=0.8)
    ref_loss, _, stats, _, _ = _reference(
        inp, reduction="mean", pg_target="vs", lambda_=1.0, clip_rho=1.0,
        clip_pg=1.0, clip_c=0.8, **{k: v for k, v in costs.items()
                                    if k.endswith("_cost")})
    assert 0.2 < stats["rho_clipped_fraction"] < 0.8
    tensors = {k: tf.constant(v) for k, v in inp.items()}
    target, values = (tf.Variable(tensors.pop(k)) for k in
                      ("target_policy_logits", "values"))

    def step(with_diagnostics):
        with tf.GradientTape() as tape:
            loss, diags = impala_loss(
                target_policy_logits=target, values=values, reduction="mean",
                jit_compile=jit_compile, with_diagnostics=with_diagnostics,
                **tensors, **costs)
        return loss, diags, tape.gradient(loss, [target, values])

    for run in (lambda f: f, tf.function):
        loss, diags, grads = run(lambda: step(False))()
        full_loss, full_diags, full_grads = run(lambda: step(True))()
        assert diags == {} and "kl" in full_diags
        np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-10)
        np.testing.assert_allclose(float(loss), float(full_loss), rtol=1e-12)
        for got, want in zip(grads, full_grads):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12,
                                       atol=1e-15)


def test_float_noise_at_the_threshold_is_not_counted_as_clipped():
    """On-policy ratios of 1 ± 1e-4 read 0 clipped; ratios of 1.01 read 1."""
    inp = {k: v.astype(np.float32) if v.dtype == np.float64 else v
           for k, v in _inputs(2).items()}
    logits = inp["target_policy_logits"]
    rng = np.random.default_rng(3)
    noisy = logits + rng.uniform(-1e-4, 1e-4, logits.shape).astype(np.float32)
    _, diags = _tf(dict(inp, behaviour_policy_logits=noisy))
    assert abs(float(diags["mean_rho"]) - 1.0) < 1e-3
    assert float(diags["rho_clipped_fraction"]) == 0.0
    assert float(diags["c_clipped_fraction"]) == 0.0
    # log ρ = 0.01 everywhere: every step is clipped at ρ̄ = c̄ = 1.
    shifted = dict(inp, behaviour_action_log_probs=categorical_log_probs(
        logits, inp["actions"]).astype(np.float32) - np.float32(0.01))
    _, diags = _tf(shifted)
    assert float(diags["rho_clipped_fraction"]) == 1.0
    assert float(diags["c_clipped_fraction"]) == 1.0


def test_lambda_returns_differ_from_vs_only_for_lambda_below_one():
    inp = _inputs(1)
    vs_loss = _tf(inp, lambda_=0.5)[1]["policy_loss"]
    lr_loss = _tf(inp, lambda_=0.5, pg_target="lambda_returns")[1]["policy_loss"]
    assert abs(float(vs_loss - lr_loss)) > 1e-3
    np.testing.assert_allclose(
        float(_tf(inp)[1]["policy_loss"]),
        float(_tf(inp, pg_target="lambda_returns")[1]["policy_loss"]), rtol=1e-12)


def _gradient_inputs(seed=2):
    """`_inputs(seed)` as tensors, the target logits and values variables."""
    inp = {k: tf.constant(v) for k, v in _inputs(seed).items()}
    for key in ("target_policy_logits", "values"):
        inp[key] = tf.Variable(inp[key])
    return inp


def _loss_gradients(inp, upstream=None):
    """d (impala_loss) / d (target logits, values), the loss's gradient
    scaled by `upstream` (a caller's `output_gradients`)."""
    with tf.GradientTape() as tape:
        loss, _ = impala_loss(**inp, entropy_cost=0., kl_cost=0.,
                              baseline_cost=0.5)
    if upstream is not None:
        upstream = tf.convert_to_tensor(upstream)  # A variable: read here.
    return tape.gradient(loss, [inp["target_policy_logits"], inp["values"]],
                         output_gradients=upstream)


def _expected_gradients(seed=2):
    """The same from the paper's definitions: vs and the advantages are
    constants, so d/d logits = -A_t (onehot(a_t) - π) and d/d V = -c (vs - V)."""
    ref = dict(_inputs(seed))
    _, _, _, vs, pg_adv = _reference(ref, entropy_cost=0., kl_cost=0.)
    onehot = np.eye(A)[ref["actions"]]
    return (-pg_adv[..., None] * (onehot - _softmax(ref["target_policy_logits"])),
            -0.5 * (vs - ref["values"]))


def test_gradients_treat_targets_as_constants():
    for got, want in zip(_loss_gradients(_gradient_inputs()),
                         _expected_gradients()):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("run", ["eager", "tf.function"])
def test_gradients_scale_with_the_upstream(run):
    """The fused loss hands back its precomputed gradient times the
    upstream: statically 1 (the loss itself), a constant, and a value known
    only when the step runs (in a tf.function)."""
    scale = tf.Variable(-0.75, dtype=tf.float64)
    compute = _loss_gradients if run == "eager" else tf.function(_loss_gradients)
    inp, expected = _gradient_inputs(), _expected_gradients()
    for upstream, factor in ((None, 1.), (tf.constant(1., tf.float64), 1.),
                             (tf.constant(2.5, tf.float64), 2.5),
                             (scale, -0.75)):
        for got, want in zip(compute(inp, upstream), expected):
            np.testing.assert_allclose(got.numpy(), factor * want, rtol=1e-9,
                                       atol=1e-12, err_msg=str(factor))


def test_batch_major_equals_time_major():
    inp = _inputs(3)
    bm = {k: (np.swapaxes(v, 0, 1) if v.ndim >= 2 else v) for k, v in inp.items()}
    loss_tm, d_tm = _tf(inp, reduction="mean")
    loss_bm, d_bm = _tf(bm, reduction="mean", time_major=False)
    np.testing.assert_allclose(float(loss_tm), float(loss_bm), rtol=1e-12)
    for key in d_tm:
        np.testing.assert_allclose(float(d_tm[key]), float(d_bm[key]), rtol=1e-12)


def _pad(inp, length, garbage, bootstrap_value):
    """Keeps steps [0, length) and fills the rest with `garbage`.

    The value at step `length` (the observation after the last valid step) is
    the valid unroll's bootstrap value, as a T + 1-observation model gives it.
    """
    padded = {}
    for key, value in inp.items():
        if key == "bootstrap_value":
            continue
        filler = np.full_like(value, garbage) if value.dtype.kind == "f" else (
            np.full_like(value, 12345))
        padded[key] = np.concatenate([value[:length], filler[length:]])
    padded["values"][length] = bootstrap_value
    padded["bootstrap_value"] = np.full_like(inp["bootstrap_value"], garbage)
    padded["mask"] = (np.arange(T) < length)[:, None] * np.ones((1, B))
    return padded


@pytest.mark.parametrize("garbage", [np.nan, np.inf, 1e6])
@pytest.mark.parametrize("pg_target", ["vs", "lambda_returns"])
def test_padding_garbage_changes_nothing(garbage, pg_target):
    length = 4
    full = _inputs(4)
    short = {k: (v[:length] if v.ndim >= 2 else v) for k, v in full.items()}
    padded = _pad(full, length, garbage, short["bootstrap_value"])
    kwargs = dict(pg_target=pg_target, lambda_=0.7, kl_cost=0.1, entropy_cost=0.01)
    for reduction in ("sum", "masked_mean"):
        loss_short, _ = _tf(short, reduction=reduction, **kwargs)
        loss_padded, _ = _tf(padded, reduction=reduction, **kwargs)
        np.testing.assert_allclose(float(loss_padded), float(loss_short), rtol=1e-12)
    targets_short = vtrace_targets(**short, pg_target=pg_target, lambda_=0.7)
    targets_padded = vtrace_targets(**padded, pg_target=pg_target, lambda_=0.7)
    np.testing.assert_allclose(targets_padded.vs[:length], targets_short.vs, rtol=1e-12)
    np.testing.assert_allclose(targets_padded.pg_advantages[:length],
                               targets_short.pg_advantages, rtol=1e-12)
    # Gradients stay finite whatever the padding holds.
    variables = {k: tf.Variable(padded[k]) for k in ("target_policy_logits", "values")}
    with tf.GradientTape() as tape:
        loss, _ = impala_loss(**dict(padded, **variables), **kwargs)
    for grad in tape.gradient(loss, list(variables.values())):
        assert np.all(np.isfinite(grad.numpy()))
        assert np.all(grad.numpy()[length:] == 0)


def test_mean_counts_padding_masked_mean_does_not():
    length, inp = 3, _inputs(5)
    short = {k: (v[:length] if v.ndim >= 2 else v) for k, v in inp.items()}
    short["bootstrap_value"] = inp["values"][length]
    inp["mask"] = (np.arange(T) < length)[:, None] * np.ones((1, B))
    costs = dict(entropy_cost=0.01, kl_cost=0.1)
    total = _reference(short, reduction="sum", **costs)[0]
    for reduction, denominator in (("mean", T * B), ("masked_mean", length * B)):
        np.testing.assert_allclose(float(_tf(inp, reduction=reduction, **costs)[0]),
                                   total / denominator, rtol=1e-10)


@pytest.mark.parametrize("pg_target", ["vs", "lambda_returns"])
def test_truncation_bootstraps_from_the_final_state(pg_target):
    """Episode 1 is steps [0, k], truncated at k; episode 2 follows (#4209)."""
    k, final_value = 3, 2.5
    inp = _inputs(6)
    inp["truncated"] = np.zeros((T, B))
    inp["truncated"][k] = 1.
    inp["truncation_values"] = np.full((T, B), np.nan)  # read only where truncated
    inp["truncation_values"][k] = final_value
    kwargs = dict(pg_target=pg_target, lambda_=0.8, clip_c_threshold=0.9)
    out = vtrace_targets(**inp, **kwargs)

    episode = {key: (value[:k + 1] if value.ndim >= 2 else value)
               for key, value in inp.items()
               if key not in ("truncated", "truncation_values")}
    episode["bootstrap_value"] = np.full((B,), final_value)
    alone = vtrace_targets(**episode, **kwargs)
    np.testing.assert_allclose(out.vs[:k + 1], alone.vs, rtol=1e-12)
    np.testing.assert_allclose(out.pg_advantages[:k + 1], alone.pg_advantages,
                               rtol=1e-12)

    # The next trajectory's values and rewards do not leak into episode 1.
    changed = dict(inp, values=inp["values"].copy(), rewards=inp["rewards"].copy())
    changed["values"][k + 1:] += 100.
    changed["rewards"][k + 1:] -= 100.
    other = vtrace_targets(**changed, **kwargs)
    np.testing.assert_allclose(other.vs[:k + 1], out.vs[:k + 1], rtol=1e-12)
    np.testing.assert_allclose(other.pg_advantages[:k + 1],
                               out.pg_advantages[:k + 1], rtol=1e-12)
    # The second episode runs on unchanged (its own bootstrap at the end).
    rest = {key: (value[k + 1:] if value.ndim >= 2 else value)
            for key, value in inp.items()
            if key not in ("truncated", "truncation_values")}
    np.testing.assert_allclose(out.vs[k + 1:], vtrace_targets(**rest, **kwargs).vs,
                               rtol=1e-12)


def test_multi_head_sums_heads():
    rng = np.random.default_rng(7)
    heads = (3, 2)
    inp = _inputs(7)
    b_logits = [rng.normal(0, 2, (T, B, p)) for p in heads]
    t_logits = [rng.normal(0, 2, (T, B, p)) for p in heads]
    actions = [(np.arange(T * B).reshape(T, B) % p).astype(np.int32) for p in heads]
    loss, diags = impala_loss(b_logits, t_logits, actions, inp["discounts"],
                              inp["rewards"], inp["values"], inp["bootstrap_value"],
                              entropy_cost=0.01)
    log_pi = sum(categorical_log_probs(t, a) for t, a in zip(t_logits, actions))
    log_mu = sum(categorical_log_probs(b, a) for b, a in zip(b_logits, actions))
    vs, pg = vtrace_reference(log_pi - log_mu, inp["discounts"], inp["rewards"],
                              inp["values"], inp["bootstrap_value"])
    entropy = sum(-(_softmax(t) * np.log(_softmax(t))).sum(-1) for t in t_logits)
    np.testing.assert_allclose(float(diags["policy_loss"]), (-log_pi * pg).sum(),
                               rtol=1e-10)
    np.testing.assert_allclose(float(diags["entropy"]), entropy.mean(), rtol=1e-10)


def test_half_precision_is_computed_in_float32():
    inp = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v)
           for k, v in _inputs(8).items()}
    loss32, _ = _tf(inp)
    half = dict(inp, target_policy_logits=inp["target_policy_logits"].astype(np.float16),
                values=inp["values"].astype(np.float16))
    loss16, diags = _tf(half)
    assert loss16.dtype == tf.float32 and diags["entropy"].dtype == tf.float32
    np.testing.assert_allclose(float(loss16), float(loss32), rtol=1e-2)


def test_sample_estimates_without_behaviour_logits():
    inp = _inputs(9)
    log_mu = categorical_log_probs(inp["behaviour_policy_logits"], inp["actions"])
    with_logits = _tf(inp, kl_cost=0.3)[1]
    no_logits = _tf(dict(inp, behaviour_policy_logits=tf.zeros([0])),
                    behaviour_action_log_probs=log_mu, kl_cost=0.3)[1]
    np.testing.assert_allclose(float(no_logits["policy_loss"]),
                               float(with_logits["policy_loss"]), rtol=1e-10)
    log_pi = categorical_log_probs(inp["target_policy_logits"], inp["actions"])
    np.testing.assert_allclose(float(no_logits["kl"]), (log_mu - log_pi).mean(),
                               rtol=1e-10)


@pytest.mark.parametrize("kwargs,match", [
    (dict(reduction="avg"), "`reduction` must be one of"),
    (dict(pg_target="q"), "`pg_target` must be one of"),
    (dict(truncated=np.zeros((T, B))), "`truncation_values` is required"),
    (dict(mask=np.ones((T, B + 1))), "`mask` has shape"),
    (dict(mask=np.ones((T,))), "`mask` must have rank 2"),
    (dict(clip_rho_threshold=-1.), "`clip_rho_threshold` must be a positive"),
    (dict(entropy_cost="0.1"), "`entropy_cost` must be a number"),
    (dict(with_diagnostics="no"), "`with_diagnostics` must be a bool"),
])
def test_errors_name_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        _tf(_inputs(), **kwargs)


def test_float_actions_are_rejected_with_a_hint():
    inp = _inputs()
    inp["actions"] = inp["actions"].astype(np.float32)
    with pytest.raises(TypeError, match="cast actions back"):
        _tf(inp)


def test_validate_args_checks_unknown_shapes_at_run_time():
    spec = tf.TensorSpec([None, None], tf.float64)

    @tf.function(input_signature=[spec, spec])
    def loss_with_mask(values, mask):
        inp = {k: tf.constant(v) for k, v in _inputs().items() if k != "values"}
        return impala_loss(values=values, mask=mask, validate_args=True,
                           jit_compile=False, **inp)[0]

    inp = _inputs()
    loss_with_mask(inp["values"], np.ones((T, B)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="`mask`"):
        loss_with_mask(inp["values"], np.ones((T, B + 1)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.uint16, np.int64,
                                   np.uint32])
def test_loss_with_narrow_and_unsigned_action_dtypes(dtype):
    inp = _inputs(seed=7)
    inp["actions"] = inp["actions"].astype(dtype)
    mask = np.ones((T, B), bool)
    mask[-2:, 1] = False  # padding is replaced by action 0 of the same dtype
    loss, _ = tf.function(lambda: _tf(inp, mask=mask, validate_args=True))()
    reference_inp = dict(inp, actions=inp["actions"].astype(np.int32))
    expected, _ = _tf(reference_inp, mask=mask)
    np.testing.assert_allclose(float(loss), float(expected), rtol=1e-12)
    ref_loss = _reference(reference_inp, entropy_cost=0.00025, kl_cost=0.0)[0]
    unmasked, _ = _tf(inp)
    np.testing.assert_allclose(float(unmasked), ref_loss, rtol=1e-10)


@pytest.mark.parametrize("alpha_", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("pg_target,lambda_", [("vs", 0.8), ("lambda_returns", 0.6)])
def test_leaky_vtrace_loss_matches_reference(alpha_, pg_target, lambda_):
    inp = _inputs(seed=3)
    options = dict(clip_rho_threshold=1.0, clip_pg_rho_threshold=1.5,
                   clip_c_threshold=0.8)
    loss, diags = _tf(inp, pg_target=pg_target, lambda_=lambda_, alpha_=alpha_,
                      kl_cost=0.1, entropy_cost=0.01, **options)
    ref_loss, ref_terms, stats, _, _ = _reference(
        inp, pg_target=pg_target, lambda_=lambda_, alpha_=alpha_, clip_rho=1.0,
        clip_pg=1.5, clip_c=0.8)
    assert 0.2 < stats["rho_clipped_fraction"] < 0.8
    np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-10)
    for key, value in ref_terms.items():
        np.testing.assert_allclose(float(diags[key]), value, rtol=1e-10,
                                   atol=1e-12, err_msg=key)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64])
def test_masking_logits_selects_bit_for_bit(dtype):
    """The padding mask over logits (one more axis than the mask) is a
    bitwise selection, not `tf.where` (docs/performance.md): the same bits
    (NaN, inf and −0 kept at valid steps, +0 at padded ones), and the same
    selection of the gradient, NaN upstream included."""
    from tf_vtrace._masking import where_valid

    rng = np.random.default_rng(7)
    values = rng.normal(size=(5, 3, 4))
    values.flat[::7] = np.nan
    values.flat[1::7] = np.inf
    values.flat[2::7] = -np.inf
    values.flat[3::7] = -0.
    logits = tf.cast(tf.constant(values), dtype)
    valid = tf.constant(rng.random((5, 3)) < 0.5)
    upstream = tf.cast(tf.constant(np.where(rng.random((5, 3, 4)) < 0.3, np.nan,
                                            rng.normal(size=(5, 3, 4)))), dtype)

    def bits(tensor):
        return tf.bitcast(tensor, tf.int64 if dtype == tf.float64 else (
            tf.int32 if dtype == tf.float32 else tf.int16)).numpy()

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        selected = where_valid(valid, logits)
        expected = tf.where(valid[..., None], logits, tf.zeros_like(logits))
    np.testing.assert_array_equal(bits(selected), bits(expected))
    np.testing.assert_array_equal(
        bits(tape.gradient(selected, logits, upstream)),
        bits(tape.gradient(expected, logits, upstream)))
