"""`ImpalaAgent` with recurrent networks (TF-Agents 0.19), in its own process.

Not collected by the main test run: tests/test_tf_agents.py runs it with
pytest in a subprocess with `TF_USE_LEGACY_KERAS=1`, like
tests/tf_agents_suite.py, whose environments, agents and checks it reuses.

The networks are TF-Agents' `ActorDistributionRnnNetwork` and
`ValueRnnNetwork` (LSTM), each alone or both. The collect policy records the
state every step started from; the learner replays each window from its
row-0 state with the window's resets. The references here step the networks
one time step at a time, carrying the state, as an actor does, rather than
unrolling them over the window as the learner does.
"""
import json

import numpy as np
import pytest
import tensorflow as tf
from tf_agents.policies import policy_saver
from tf_agents.trajectories import time_step as ts
from tf_agents_suite import (
    assert_loss_matches_reference,
    cartpole_env,
    check_checkpointer_round_trip,
    collect,
    make_agent,
    multi_head_env,
    perturb,
    reload_in_a_fresh_process,
    snapshot,
    trainable,
    windows,
)
from tolerances import rtol_for

from tf_vtrace.tf_agents import BEHAVIOUR_LOGITS, POLICY_STATE

BOTH, ACTOR, VALUE = ("actor", "value"), ("actor",), ("value",)
LSTM_LOG_PROB_RTOL = rtol_for(np.float32, 64)  # matmuls over 16 + 8 inputs, steps chained


def recorded_initial_state(experience, network, name):
    """The state the window's row 0 started from, in the network's state
    structure (recorded with tuples for lists); () for a feed-forward net."""
    recorded = experience.policy_info.get(POLICY_STATE, {}).get(name, ())
    return tf.nest.pack_sequence_as(
        network.state_spec, [t[:, 0] for t in tf.nest.flatten(recorded)])


def as_logits(output):
    if hasattr(output, "logits_parameter"):
        return output.logits_parameter()
    return output


def stepped(network, experience, state):
    """The network on [B, T, ...] one step at a time from `state`, as an
    actor runs it (TF-Agents' networks reset at step_type FIRST)."""
    outputs = []
    for t in range(experience.step_type.shape[1]):
        output, state = network(experience.observation[:, t],
                                step_type=experience.step_type[:, t],
                                network_state=state)
        outputs.append(tf.nest.map_structure(as_logits, output))
    return tf.nest.map_structure(lambda *o: tf.stack(o, axis=1), *outputs)


def windows_across_an_episode_start(everything, before=5, length=16):
    """One window per env row that starts `before` steps ahead of an
    episode's first step: it starts mid-episode, from a state the actor had
    carried there, and crosses a reset."""
    step_type = everything.step_type.numpy()
    starts = []
    for row in step_type:
        firsts = np.flatnonzero(row == ts.StepType.FIRST)
        starts.append(next(int(f) - before for f in firsts
                           if f >= before and f - before + length <= len(row)))
    return tf.nest.map_structure(
        lambda t: tf.stack([t[b, s:s + length] for b, s in enumerate(starts)]),
        everything)


def log_probs(logits, actions):
    logits = np.asarray(logits, np.float64)
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return np.take_along_axis(log_softmax, np.asarray(actions)[..., None], -1)[..., 0]


@pytest.fixture(scope="module")
def lstm_data():
    """An agent with an LSTM actor and value network, and what it collected."""
    env = cartpole_env()
    agent = make_agent(env, recurrent=BOTH)
    return env, agent, collect(agent, env, 40)


# --- Specs ----------------------------------------------------------------------


@pytest.mark.parametrize("recurrent", [BOTH, ACTOR, VALUE, ()],
                         ids=["both", "actor", "value", "feed_forward"])
def test_policy_state_and_policy_info_hold_the_recurrent_networks(recurrent):
    env = cartpole_env()
    agent = make_agent(env, recurrent=recurrent)
    names = {f"{kind}_network" for kind in recurrent}
    collect_state = agent.collect_policy.policy_state_spec
    assert set(collect_state or {}) == names
    info = agent.collect_policy.info_spec
    if recurrent:
        assert set(info) == {BEHAVIOUR_LOGITS, POLICY_STATE}
        tf.nest.assert_same_structure(info[POLICY_STATE], collect_state, check_types=False)
    else:  # the feed-forward agent's specs are what they were
        assert set(info) == {BEHAVIOUR_LOGITS} and collect_state == ()
    # The greedy policy carries the actor's state only.
    assert set(agent.policy.policy_state_spec or {}) == names & {"actor_network"}
    assert agent.policy.info_spec == ()
    # Checkpoints and savers see every network whose state the policy carries.
    assert len(agent.collect_policy.variables()) == sum(
        len(getattr(agent, name).variables) for name in names | {"actor_network"})


# --- Lag 0: the learner replays exactly what the actor computed ----------------


def test_lag_zero_learner_log_probs_equal_behaviour_across_an_episode_start():
    env = cartpole_env()
    agent = make_agent(env, recurrent=BOTH)
    perturb(agent.actor_network, 0.5, seed=1)  # weights large enough for the state to matter
    experience = windows_across_an_episode_start(collect(agent, env, 60).gather_all())
    step_type = experience.step_type.numpy()
    assert (step_type[:, 0] != ts.StepType.FIRST).all()
    assert (step_type[:, 1:] == ts.StepType.FIRST).any(axis=1).all()
    actions = experience.action.numpy()[:, :-1]
    behaviour = log_probs(experience.policy_info[BEHAVIOUR_LOGITS][:, :-1], actions)

    def learner(experience):
        (target,) = agent._loss_inputs(experience, training=False).target_policy_logits
        return log_probs(target, actions)

    np.testing.assert_allclose(learner(experience), behaviour,
                               rtol=LSTM_LOG_PROB_RTOL, atol=LSTM_LOG_PROB_RTOL)
    # The public diagnostics say the same: KL(μ‖π) ≥ 0 at each step, mean 0.
    diagnostics = agent.loss(experience).extra
    assert float(diagnostics.kl) <= 1e-12
    np.testing.assert_allclose(float(diagnostics.mean_rho), 1.0, rtol=LSTM_LOG_PROB_RTOL)

    # Not an identity by accident: replayed from a zero state, the steps
    # before the reset differ; without the resets, those after it differ.
    info = experience.policy_info
    zero_state = experience._replace(policy_info=dict(
        info, **{POLICY_STATE: tf.nest.map_structure(tf.zeros_like, info[POLICY_STATE])}))
    no_resets = experience._replace(step_type=tf.where(
        experience.step_type == ts.StepType.FIRST, ts.StepType.MID, experience.step_type))
    episode = np.cumsum(step_type == ts.StepType.FIRST, axis=1)[:, :-1]
    before_reset, after_reset = episode == 0, episode > 0
    assert np.abs(learner(zero_state) - behaviour)[before_reset].max() > 1e-3
    assert np.abs(learner(zero_state) - behaviour)[after_reset].max() < 1e-4
    assert np.abs(learner(no_resets) - behaviour)[after_reset].max() > 1e-3


# --- Training and the loss ------------------------------------------------------


@pytest.mark.parametrize("recurrent", [BOTH, ACTOR, VALUE], ids=["both", "actor", "value"])
def test_one_train_step_changes_every_weight_of_recurrent_networks(recurrent):
    env = cartpole_env()
    agent = make_agent(env, recurrent=recurrent, entropy_cost=0.01)
    experience = windows(collect(agent, env, 40), length=11)  # as_dataset's windows
    assert experience.policy_info[POLICY_STATE]["actor_network" if "actor" in recurrent
                                                else "value_network"][0].shape == (8, 11, 8)
    before = snapshot(trainable(agent))
    assert len(before) == 7 * len(recurrent) + 4 * (2 - len(recurrent))  # LSTM: 7, MLP: 4
    loss_info = agent.train(experience)
    assert np.isfinite(loss_info.loss.numpy()) and int(agent.train_step_counter) == 1
    assert all(not np.array_equal(b, a) for b, a in zip(before, snapshot(trainable(agent))))


@pytest.mark.parametrize("env_name,recurrent,reduction", [
    ("cartpole", BOTH, "sum"), ("cartpole", VALUE, "sum"),
    ("multi_head", ACTOR, "masked_mean")])
def test_recurrent_loss_equals_the_float64_reference(env_name, recurrent, reduction):
    """With lag > 0 (π perturbed after collection) the loss is the IMPALA
    loss of the networks stepped from each window's recorded state."""
    env = cartpole_env() if env_name == "cartpole" else multi_head_env()
    options = dict(baseline_cost=0.3, entropy_cost=0.02, kl_cost=0.1,
                   reduction=reduction)
    clips = dict(clip_rho_threshold=1.2, clip_pg_rho_threshold=0.9,
                 clip_c_threshold=0.8, lambda_=0.9, alpha_=1.0)
    agent = make_agent(env, recurrent=recurrent, discount_factor=0.95,
                       **options, **clips)
    everything = collect(agent, env, 60).gather_all()
    experience = tf.nest.map_structure(  # windows that start mid-episode too
        lambda t: tf.concat([t[:, s:s + 16] for s in (3, 23, 43)], axis=0), everything)
    perturb(agent.actor_network, 0.5, seed=1)
    perturb(agent.value_network, 0.1, seed=2)

    actor, value = agent.actor_network, agent.value_network
    target_logits = stepped(
        actor, experience, recorded_initial_state(experience, actor, "actor_network"))
    values = stepped(
        value, experience, recorded_initial_state(experience, value, "value_network"))
    assert_loss_matches_reference(agent, experience, target_logits, values,
                                  env.action_spec(), options, clips)


def test_experience_without_the_recorded_state_is_refused(lstm_data):
    _, agent, replay_buffer = lstm_data
    experience = windows(replay_buffer, length=11)
    stateless = experience._replace(policy_info={
        BEHAVIOUR_LOGITS: experience.policy_info[BEHAVIOUR_LOGITS]})
    # TF-Agents' own check of `training_data_spec`; the message shows both
    # structures, the spec's with 'policy_state'.
    for method in (agent.train, agent.loss):
        with pytest.raises(ValueError, match="do not have matching structures"
                           "(.|\n)*'policy_state'"):
            method(stateless)


# --- Checkpoints and SavedModel ------------------------------------------------


def test_checkpointer_round_trip_of_recurrent_networks(lstm_data, tmp_path):
    env, _, replay_buffer = lstm_data
    experience = windows(replay_buffer, length=11)
    check_checkpointer_round_trip(
        lambda seed: make_agent(env, seed=seed, recurrent=BOTH), experience, tmp_path)


RELOAD_RECURRENT = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_probability  # registers the distributions' TypeSpecs
data = json.load(open(sys.argv[3]))
assert "tf_agents" not in sys.modules


def play(export, output):
    '''Steps the reloaded policy through the observations, carrying its state.'''
    policy = tf.saved_model.load(export)
    batch = len(data["observations"][0])
    state = policy.signatures["get_initial_state"](batch_size=tf.constant(batch))
    outputs = []
    for observation, step_type in zip(data["observations"], data["step_types"]):
        step = policy.signatures["action"](
            **{"0/step_type": tf.constant(step_type, tf.int32),
               "0/reward": tf.zeros([batch]), "0/discount": tf.ones([batch]),
               "0/observation": tf.constant(observation, tf.float32)},
            **{"1/" + name: value for name, value in state.items()})
        state = {name[len("state/"):]: value for name, value in step.items()
                 if name.startswith("state/")}
        outputs.append(step[output].numpy())
    return np.stack(outputs)


assert play(sys.argv[1], "action").tolist() == data["actions"]
np.testing.assert_allclose(play(sys.argv[2], "info/behaviour_logits"), data["logits"],
                           rtol=1e-5, atol=1e-5)
print("RELOADED_OK")
"""


def test_policy_saver_round_trip_of_a_recurrent_policy_acts_with_its_state(tmp_path):
    env = cartpole_env()
    agent = make_agent(env, seed=4, recurrent=BOTH)
    perturb(agent.actor_network, 0.5, seed=3)
    steps, batch = 10, 6
    rng = np.random.default_rng(0)
    observations = rng.normal(0, 0.5, (steps, batch, 4)).astype(np.float32)
    step_types = np.full((steps, batch), ts.StepType.MID, np.int32)
    step_types[0] = ts.StepType.FIRST
    step_types[5, :3] = ts.StepType.FIRST  # half the batch starts a new episode

    def play(policy, step_types):
        state, outputs = policy.get_initial_state(batch), []
        for observation, step_type in zip(observations, step_types):
            time_step = ts.TimeStep(tf.constant(step_type), tf.zeros([batch]),
                                    tf.ones([batch]), tf.constant(observation))
            step = policy.action(time_step, state)
            state = step.state
            outputs.append(step)
        return outputs

    actions = np.stack([s.action.numpy() for s in play(agent.policy, step_types)])
    logits = np.stack([s.info[BEHAVIOUR_LOGITS].numpy()
                       for s in play(agent.collect_policy, step_types)])
    # The state matters here: reset at every step, the logits differ.
    stateless = np.stack([s.info[BEHAVIOUR_LOGITS].numpy() for s in play(
        agent.collect_policy, np.full_like(step_types, ts.StepType.FIRST))])
    assert np.abs(stateless - logits)[1:].max() > 1e-3
    assert 0 < actions.sum() < actions.size  # both actions occur

    policy_saver.PolicySaver(agent.policy, batch_size=None).save(str(tmp_path / "policy"))
    policy_saver.PolicySaver(agent.collect_policy, batch_size=None).save(
        str(tmp_path / "collect_policy"))
    (tmp_path / "data.json").write_text(json.dumps({
        "observations": observations.tolist(), "step_types": step_types.tolist(),
        "actions": actions.tolist(), "logits": logits.tolist()}))
    reload_in_a_fresh_process(RELOAD_RECURRENT, tmp_path / "policy",
                              tmp_path / "collect_policy", tmp_path / "data.json")
