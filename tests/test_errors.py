"""Bad input raises an error that names the argument and what was expected."""
import re

import numpy as np
import pytest
import tensorflow as tf

import tf_vtrace


def inputs(T=4, B=3, dtype=tf.float32):
    return dict(log_rhos=tf.zeros([T, B], dtype), discounts=tf.ones([T, B], dtype),
                rewards=tf.ones([T, B], dtype), values=tf.zeros([T, B], dtype),
                bootstrap_value=tf.zeros([B], dtype))


def logits_inputs(T=4, B=3, num_actions=5):
    batch = inputs(T, B)
    del batch["log_rhos"]
    batch["behaviour_policy_logits"] = tf.zeros([T, B, num_actions])
    batch["target_policy_logits"] = tf.zeros([T, B, num_actions])
    batch["actions"] = tf.zeros([T, B], tf.int32)
    return batch


@pytest.mark.parametrize("name", ["log_rhos", "discounts", "rewards"])
def test_wrong_rank_names_argument(name):
    batch = inputs()
    batch[name] = tf.zeros([4])
    with pytest.raises(ValueError, match=f"`{name}` must have rank 2"):
        tf_vtrace.from_importance_weights(**batch)


def test_values_without_time_axis():
    batch = inputs()
    batch["values"] = tf.zeros([3])
    with pytest.raises(ValueError, match="`values` must have a known rank >= 2"):
        tf_vtrace.from_importance_weights(**batch)


@pytest.mark.parametrize("name,shape", [("rewards", [5, 3]), ("discounts", [4, 2]),
                                        ("log_rhos", [4, 3, 1])])
def test_mismatched_time_or_batch(name, shape):
    batch = inputs()
    batch[name] = tf.zeros(shape)
    with pytest.raises(ValueError, match=f"`{name}`"):
        tf_vtrace.from_importance_weights(**batch)


@pytest.mark.parametrize("shape", [[4], [3, 1], []])
def test_bootstrap_shape(shape):
    batch = inputs()
    batch["bootstrap_value"] = tf.zeros(shape)
    with pytest.raises(ValueError, match="`bootstrap_value`"):
        tf_vtrace.from_importance_weights(**batch)


def test_batch_major_bootstrap_uses_batch_axis():
    batch = inputs(T=4, B=3)
    with pytest.raises(ValueError, match="`bootstrap_value`"):
        # [B, T] layout would need a bootstrap of [4], not [3].
        tf_vtrace.from_importance_weights(**batch, time_major=False)


@pytest.mark.parametrize("name", ["values", "rewards", "bootstrap_value"])
def test_non_float_input(name):
    batch = inputs()
    batch[name] = tf.cast(batch[name], tf.int32)
    with pytest.raises(TypeError, match=f"`{name}` must be a floating-point"):
        tf_vtrace.from_importance_weights(**batch)


def test_numpy_inputs_follow_values_dtype():
    batch = inputs()
    batch["rewards"] = np.ones([4, 3])  # float64 numpy: converted, not an error
    out = tf_vtrace.from_importance_weights(**batch)
    assert out.vs.dtype == tf.float32


@pytest.mark.parametrize("name", ["clip_rho_threshold", "clip_pg_rho_threshold",
                                  "clip_c_threshold"])
@pytest.mark.parametrize("value", [0.0, -1.0])
def test_non_positive_threshold(name, value):
    with pytest.raises(ValueError, match=f"`{name}` must be a positive"):
        tf_vtrace.from_importance_weights(**inputs(), **{name: value})


@pytest.mark.parametrize("validate_args", [False, True])
def test_tensor_threshold_is_checked(validate_args):
    with pytest.raises(ValueError, match="`clip_rho_threshold` .* must be positive"):
        tf_vtrace.from_importance_weights(
            **inputs(), clip_rho_threshold=tf.constant(-1.0),
            validate_args=validate_args)


def test_lambda_shape():
    with pytest.raises(ValueError, match="`lambda_`"):
        tf_vtrace.from_importance_weights(**inputs(), lambda_=tf.ones([4]))


@pytest.mark.parametrize("bad_action", [5, -1])
def test_actions_out_of_range_when_validating(bad_action):
    batch = logits_inputs(num_actions=5)
    batch["actions"] = tf.tensor_scatter_nd_update(batch["actions"], [[3, 2]],
                                                   [bad_action])
    with pytest.raises(ValueError, match="`actions` must be"):
        tf_vtrace.from_logits(**batch, validate_args=True)


def test_float_actions_for_categorical():
    batch = logits_inputs()
    batch["actions"] = tf.zeros([4, 3])
    with pytest.raises(TypeError, match="`actions` must be integers"):
        tf_vtrace.from_logits(**batch)


def test_actions_rank_for_categorical():
    batch = logits_inputs()
    batch["actions"] = tf.zeros([4, 3, 5], tf.int32)
    with pytest.raises(ValueError, match="`actions` has shape"):
        tf_vtrace.from_logits(**batch)


def test_logits_time_mismatch_with_values():
    batch = logits_inputs()
    batch["target_policy_logits"] = tf.zeros([5, 3, 5])
    batch["behaviour_policy_logits"] = tf.zeros([5, 3, 5])
    batch["actions"] = tf.zeros([5, 3], tf.int32)
    with pytest.raises(ValueError, match="`target_policy_logits` has shape .* must be"):
        tf_vtrace.from_logits(**batch)


def test_dist_class_must_return_a_distribution():
    with pytest.raises(TypeError, match="`dist_class` must build a tfp"):
        tf_vtrace.from_logits(**logits_inputs(), dist_class=lambda logits: logits)


def test_head_count_mismatch():
    batch = logits_inputs()
    with pytest.raises(ValueError, match="`actions` has 2 heads"):
        tf_vtrace.multi_from_logits(
            [batch.pop("behaviour_policy_logits")],
            [batch.pop("target_policy_logits")],
            [batch["actions"], batch.pop("actions")], **batch)


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_lambda_out_of_range(value):
    with pytest.raises(ValueError, match=r"`lambda_` must be in \[0, 1\]"):
        tf_vtrace.from_importance_weights(**inputs(), lambda_=value)


def test_thresholds_passed_where_dist_class_goes():
    batch = logits_inputs()
    ordered = [batch[k] for k in ("behaviour_policy_logits", "target_policy_logits",
                                  "actions", "discounts", "rewards", "values",
                                  "bootstrap_value")]
    with pytest.raises(TypeError, match="`dist_class` must be None"):
        tf_vtrace.from_logits(*ordered, 1.0, 1.0)


def test_get_log_rhos_rejects_bare_tensors():
    with pytest.raises(TypeError, match="`target_action_log_probs` must be a list"):
        tf_vtrace.get_log_rhos(tf.zeros([4, 3]), tf.zeros([4, 3]))


# --- Broadcasting and the order of the checks ----------------------------------


@pytest.mark.parametrize("name,shape", [
    ("log_rhos", [4, 3, 2]),   # 2 vs 5: neither equal nor 1
    ("rewards", [1, 3, 5]),    # the time axis never broadcasts
    ("discounts", [4, 2, 1]),  # B of 2 vs 3
])
def test_shapes_that_do_not_broadcast_name_the_argument(name, shape):
    batch = inputs(T=4, B=3)
    batch["values"] = tf.zeros([4, 3, 5])
    batch["bootstrap_value"] = tf.zeros([3, 5])
    for other in ("log_rhos", "discounts", "rewards"):
        batch[other] = tf.zeros([4, 3, 1])
    batch[name] = tf.zeros(shape)
    with pytest.raises(ValueError, match=f"`{name}` has shape"):
        tf_vtrace.from_importance_weights(**batch)


def test_bootstrap_must_be_the_broadcast_shape_without_time():
    batch = dict(log_rhos=tf.zeros([4, 3, 1]), discounts=tf.ones([4, 3, 1]),
                 rewards=tf.ones([4, 3, 5]), values=tf.zeros([4, 3, 5]),
                 bootstrap_value=tf.zeros([3, 1]))
    with pytest.raises(ValueError, match=r"`bootstrap_value` has shape \(3, 1\)"):
        tf_vtrace.from_importance_weights(**batch)


def test_unknown_sizes_that_differ_are_asserted_when_validating():
    spec = tf.TensorSpec([None, None, None], tf.float32)

    @tf.function(input_signature=[spec] * 4 + [tf.TensorSpec([None, None])])
    def targets(log_rhos, discounts, rewards, values, bootstrap_value):
        return tf_vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values, bootstrap_value,
            validate_args=True).vs

    batch = dict(log_rhos=tf.zeros([4, 3, 2]), discounts=tf.ones([4, 3, 5]),
                 rewards=tf.ones([4, 3, 5]), values=tf.zeros([4, 3, 5]),
                 bootstrap_value=tf.zeros([3, 5]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="`log_rhos` must"):
        targets(**batch)


def test_rank_is_checked_before_shapes():
    """A wrong rank is reported as such even when another shape is off too."""
    batch = inputs(T=4, B=3)
    batch["rewards"] = tf.zeros([5, 3])      # wrong T ...
    batch["bootstrap_value"] = tf.zeros([])  # ... and a wrong rank after it
    with pytest.raises(ValueError, match="`bootstrap_value` must have rank 1"):
        tf_vtrace.from_importance_weights(**batch)


def test_lambda_rank_is_checked_before_shapes():
    batch = inputs(T=4, B=3)
    batch["discounts"] = tf.zeros([4, 2])
    with pytest.raises(ValueError, match="`lambda_` must have rank 0"):
        tf_vtrace.from_importance_weights(**batch, lambda_=tf.ones([4]))


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_alpha_out_of_range(value):
    with pytest.raises(ValueError, match=r"`alpha_` must be in \[0, 1\]"):
        tf_vtrace.from_importance_weights(**inputs(), alpha_=value)


def test_tensor_alpha_asserted_when_validating():
    with pytest.raises(ValueError, match="`alpha_` .* must be"):
        tf_vtrace.from_importance_weights(
            **inputs(), alpha_=tf.constant(1.5), validate_args=True)


def test_alpha_must_be_a_scalar():
    with pytest.raises(ValueError, match="`alpha_` must be a scalar"):
        tf_vtrace.from_importance_weights(**inputs(), alpha_=tf.ones([4, 3]))


# --- The Keras face: bad settings are named when the loss is made -----------------


BAD_ACTION_SIZES = [[0], [-1, 5], [2.5], [4.7], 4, [], "4"]


@pytest.mark.parametrize("action_sizes", BAD_ACTION_SIZES)
def test_impala_loss_refuses_bad_action_sizes_when_made(action_sizes):
    with pytest.raises(ValueError, match=r"`action_sizes` must be a non-empty list "
                                         r"of integers >= 1"):
        tf_vtrace.ImpalaLoss(action_sizes=action_sizes)


@pytest.mark.parametrize("action_sizes", BAD_ACTION_SIZES)
def test_unpacking_refuses_bad_action_sizes(action_sizes):
    y_pred, y_true = tf.zeros([2, 4, 5]), tf.zeros([2, 3, 10])
    with pytest.raises(ValueError, match=r"`action_sizes` must be"):
        tf_vtrace.unpack_predictions(y_pred, action_sizes)
    with pytest.raises(ValueError, match=r"`action_sizes` must be"):
        tf_vtrace.unpack_targets(y_true, action_sizes)


def test_numpy_action_sizes_are_taken_as_ints():
    loss = tf_vtrace.ImpalaLoss(action_sizes=np.array([2, 2]))
    assert loss.action_sizes == [2, 2]
    assert all(type(size) is int for size in loss.get_config()["action_sizes"])


@pytest.mark.parametrize("name", ["baseline_cost", "entropy_cost", "kl_cost"])
@pytest.mark.parametrize("value", ["x", None, [0.5]])
def test_impala_loss_refuses_a_cost_that_is_not_a_number_when_made(name, value):
    with pytest.raises(TypeError, match=rf"`{name}` must be a number, got "
                                        rf"{re.escape(repr(value))}"):
        tf_vtrace.ImpalaLoss(**{name: value})


def test_impala_metrics_refuses_one_name_as_a_string():
    with pytest.raises(TypeError, match=r"`diagnostics` must be a list of names, got "
                                        r"the string 'mean_rho': pass \['mean_rho'\]"):
        tf_vtrace.impala_metrics(tf_vtrace.ImpalaLoss(), "mean_rho")
    assert [m.name for m in tf_vtrace.impala_metrics(tf_vtrace.ImpalaLoss(), ["mean_rho"])
            ] == ["mean_rho"]


# --- Flags are bools: "False" is a true string, None a false value --------------


def _iw_args(T=3, B=2):
    return (tf.zeros([T, B]), tf.fill([T, B], 0.9), tf.ones([T, B]), tf.zeros([T, B]),
            tf.zeros([B]))


def _loss_args(T=3, B=2, A=4):
    logits = tf.zeros([T, B, A])
    return (logits, logits, tf.zeros([T, B], tf.int32), tf.fill([T, B], 0.9),
            tf.ones([T, B]), tf.zeros([T, B]), tf.zeros([B]))


@pytest.mark.parametrize("flag", ["time_major", "jit_compile", "validate_args"])
@pytest.mark.parametrize("value", ["False", None, 1])
def test_a_flag_that_is_not_a_bool_is_named(flag, value):
    match = rf"`{flag}` must be a bool, got {re.escape(repr(value))}"
    # A valid eager call first: the next call of its signature takes the
    # cached kernel, which must check the flag too.
    tf_vtrace.from_importance_weights(*_iw_args())
    with pytest.raises(TypeError, match=match):
        tf_vtrace.from_importance_weights(*_iw_args(), **{flag: value})
    with pytest.raises(TypeError, match=match):
        tf_vtrace.impala_loss(*_loss_args(), **{flag: value})
    if flag != "validate_args":
        with pytest.raises(TypeError, match=match):
            tf_vtrace.VTrace(**{flag: value})
    if flag == "jit_compile":
        with pytest.raises(TypeError, match=match):
            tf_vtrace.ImpalaLoss(jit_compile=value)


def test_cross_replica_must_be_a_bool():
    with pytest.raises(TypeError, match=r"`cross_replica` must be a bool, got 'no'"):
        tf_vtrace.impala_loss(*_loss_args(), cross_replica="no")


def test_the_eager_cache_does_not_let_a_number_pass_for_a_checked_flag():
    args = _iw_args(T=7, B=5)  # A shape of its own: its first call fills the cache.
    tf_vtrace.from_importance_weights(*args, time_major=True)
    tf_vtrace.from_importance_weights(*args, time_major=True)  # The cached path.
    with pytest.raises(TypeError, match=r"`time_major` must be a bool, got 1"):
        tf_vtrace.from_importance_weights(*args, time_major=1)
    assert tf_vtrace.from_importance_weights(*args, time_major=np.bool_(True)).vs.shape == [7, 5]


@pytest.mark.parametrize("position, name", [(1, "discounts"), (2, "rewards"),
                                            (4, "bootstrap_value")])
def test_none_for_a_sequence_names_the_argument(position, name):
    args = list(_iw_args())
    args[position] = None
    with pytest.raises(ValueError, match=rf"`{name}` must be a tensor or an array, "
                                         r"got NoneType"):
        tf_vtrace.from_importance_weights(*args)


@pytest.mark.parametrize("position, name", [(0, "behaviour_policy_logits"),
                                            (1, "target_policy_logits"), (2, "actions")])
def test_none_for_logits_or_actions_names_the_argument(position, name):
    args = list(_loss_args())
    args[position] = None
    for function in (tf_vtrace.from_logits, tf_vtrace.impala_loss):
        with pytest.raises(ValueError, match=rf"`{name}` must be a tensor or an "
                                             r"array, got NoneType"):
            function(*args)


def test_a_ragged_list_names_the_argument():
    with pytest.raises(ValueError, match=r"`policy_logits` must be a tensor or an array, "
                                         r"got list: .*non-rectangular"):
        tf_vtrace.log_probs_from_logits_and_actions([[0.], [0., 1.]], [0, 0])


@pytest.mark.parametrize("name", ["actions", "rewards", "discounts",
                                  "behaviour_policy_logits"])
def test_pack_targets_names_an_argument_given_none(name):
    B, T, A = 2, 3, 4
    args = dict(actions=np.zeros([B, T], int), rewards=np.ones([B, T]),
                discounts=np.ones([B, T]), behaviour_policy_logits=np.zeros([B, T, A]))
    args[name] = None
    with pytest.raises(ValueError, match=rf"`{name}` must be a tensor or an array, "
                                         r"got NoneType"):
        tf_vtrace.pack_targets(**args)


# --- Inputs that used to pass silently or fail opaquely ------------------------


@pytest.mark.parametrize("dones", [
    np.zeros([4, 3], bool), tf.zeros([4, 3], tf.bool), [[False] * 3] * 4])
def test_bool_discounts_are_refused(dones):
    """A `dones` array is the inverse of discounts: as 0.0/1.0 it would cut
    every step that did not end an episode and keep the terminal ones."""
    batch = inputs()
    batch["discounts"] = dones
    with pytest.raises(TypeError, match=r"`discounts` must be floating point, "
                                        r"got bools: .*gamma \* \(1 - dones\)"):
        tf_vtrace.from_importance_weights(**batch)


def test_bool_rewards_are_refused():
    batch = inputs()
    batch["rewards"] = np.ones([4, 3], bool)
    with pytest.raises(TypeError, match="`rewards` must be floating point"):
        tf_vtrace.from_importance_weights(**batch)


def test_fewer_behaviour_heads_than_target_heads_names_the_argument():
    batch = logits_inputs()
    logits, actions = batch["target_policy_logits"], batch["actions"]
    with pytest.raises(ValueError, match="`behaviour_policy_logits` has 1 heads "
                                         "but `target_policy_logits` has 2"):
        tf_vtrace.multi_from_logits(
            [logits], [logits, logits], [actions, actions], batch["discounts"],
            batch["rewards"], batch["values"], batch["bootstrap_value"])


def test_a_trailing_value_axis_blames_values():
    """A Dense(1) value head gives [T, B, 1]: upstream (scalable_agent, RLlib)
    takes [T, B] values; the error names `values`, not the logits."""
    batch = logits_inputs()
    batch["values"] = batch["values"][..., None]
    with pytest.raises(ValueError, match=r"`values` has shape \(4, 3, 1\).*"
                                         r"tf.squeeze\(values, -1\)"):
        tf_vtrace.from_logits(**batch)


def test_a_size_one_batch_axis_broadcasts_as_upstream():
    """[T, 1] discounts broadcast over B, as in scalable_agent and RLlib
    (their arithmetic broadcasts; they check ranks only): the targets of the
    [T, B] tiling."""
    batch = inputs()
    batch["discounts"] = tf.constant([[0.9], [0.0], [0.5], [1.0]])
    batch["rewards"] = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3])
    broadcast = tf_vtrace.from_importance_weights(**batch)
    tiled = tf_vtrace.from_importance_weights(
        **dict(batch, discounts=tf.tile(batch["discounts"], [1, 3])))
    np.testing.assert_array_equal(broadcast.vs, tiled.vs)  # the same ops


def _in_callers_xla_function(batch):
    spec = tf.TensorSpec([None, None])

    @tf.function(jit_compile=True, input_signature=[spec] * 4 + [tf.TensorSpec([None])])
    def targets(log_rhos, discounts, rewards, values, bootstrap_value):
        return tf_vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values, bootstrap_value).vs

    return targets(**batch)


@pytest.mark.parametrize("name,shape,node", [
    ("rewards", [1, 3], "rewards_must_have_the_size_of_values_along_axis_0"),
    ("rewards", [5, 3], "rewards_must_have_the_size_of_values_along_axis_0"),
    ("discounts", [4, 1], "discounts_must_have_the_size_of_values_along_axis_1"),
    ("bootstrap_value", [1], "bootstrap_value_must_be_B_of_values"),
])
def test_unknown_sizes_inside_a_callers_xla_function_name_the_argument(
        name, shape, node):
    """XLA drops asserts, but compiles for the run's sizes: a size that does
    not match fails that compilation at a node named after the argument,
    rather than broadcasting silently (a [1, B] `rewards`) or failing in the
    arithmetic."""
    batch = inputs()
    _in_callers_xla_function(batch)  # Matching sizes compile and run.
    batch[name] = tf.zeros(shape)
    with pytest.raises(tf.errors.InvalidArgumentError, match=node):
        _in_callers_xla_function(batch)
