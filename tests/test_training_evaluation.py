"""Greedy evaluation during training (`Config.eval_every`): evaluated when
a multiple of `eval_every` env steps is crossed and at the end, logged to
``evaluations.csv`` and TensorBoard, the best policy exported to
``policy_best/`` (ties: the later one), and what the loop measured is what
the exported policies give when evaluated from disk; a resumed run redoes
the evaluations after its checkpoint and drops a best policy from after it."""
import glob
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
from gymnasium.spaces import Box

from tf_vtrace.agent import evaluate as evaluate_lib
from tf_vtrace.agent import networks
from tf_vtrace.agent import train as train_lib
from tf_vtrace.agent.config import Config

# 16 env steps an update, 12 updates; an evaluation every 3 updates.
EVALUATED = Config(num_envs=2, unroll_length=8, total_env_steps=16 * 12,
                   checkpoint_every=4, jit_compile=False, backend="local",
                   eval_every=48, eval_episodes=3, max_episode_steps=60)
EVAL_STEPS = [48, 96, 144, 192]


def _rows(out):
    with open(pathlib.Path(out) / "evaluations.csv") as handle:
        header, *rows = [line.strip().split(",") for line in handle]
    assert header == ["env_steps", "update", "mean_return", "min_return",
                      "max_return"]
    return np.array(rows, float)


def _scalars(out, tag):
    """[(step, value)] of `tag` in the run's TensorBoard events, in order."""
    found = []
    for path in sorted(glob.glob(str(pathlib.Path(out) / "tensorboard" / "events.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            found += [(event.step, float(tf.make_ndarray(v.tensor)))
                      for v in event.summary.value if v.tag == tag]
    return found


def _model():
    return networks.build_network(Box(-1., 1., (4,)), (2,), (8,))


def _evaluate(path):
    return evaluate_lib.evaluate(str(path), EVALUATED.eval_episodes,
                                 seed=evaluate_lib.EVAL_SEED).mean()


def test_evaluations_are_logged_and_the_best_policy_is_kept(tmp_path):
    summary = train_lib.train(EVALUATED, str(tmp_path), progress=False)
    rows = _rows(tmp_path)
    assert rows[:, 0].tolist() == EVAL_STEPS
    assert rows[:, 1].tolist() == [3, 6, 9, 12]
    assert (rows[:, 3] <= rows[:, 2]).all() and (rows[:, 2] <= rows[:, 4]).all()
    best = rows[:, 2].max()
    later_best = max(s for s, m in zip(rows[:, 0], rows[:, 2]) if m == best)
    assert summary["evaluations"] == 4
    assert summary["eval_greedy_last"] == rows[-1, 2]
    assert summary["eval_greedy_best"] == best
    assert summary["eval_best_env_steps"] == later_best
    saved = json.loads((tmp_path / "policy_best" / "best.json").read_text())
    assert saved == {"env_steps": later_best, "update": later_best // 16,
                     "greedy_return": best}
    # Evaluated from disk on the same episodes: what the loop measured.
    assert _evaluate(tmp_path / "policy_best") == best
    assert _evaluate(tmp_path / "policy") == rows[-1, 2]
    logged = _scalars(tmp_path, "eval/greedy_return")
    assert [step for step, _ in logged] == EVAL_STEPS
    # TensorBoard keeps float32.
    assert [value for _, value in logged] == rows[:, 2].astype(np.float32).tolist()


def test_no_evaluation_by_default(tmp_path):
    summary = train_lib.train(EVALUATED.replace(eval_every=0), str(tmp_path),
                              progress=False)
    assert "evaluations" not in summary
    assert not (tmp_path / "evaluations.csv").exists()
    assert not (tmp_path / "policy_best").exists()


def test_a_resumed_run_redoes_the_evaluations_after_its_checkpoint(tmp_path):
    """The newest checkpoint (update 12) broken: the run resumes at update 8
    (env step 128) and evaluates at 144 and 192 again, once each in the CSV
    and TensorBoard; the whole run's count is in the summary."""
    train_lib.train(EVALUATED, str(tmp_path), progress=False)
    data = tmp_path / "checkpoints" / "ckpt-12.data-00000-of-00001"
    data.write_bytes(b"\0" * 64)
    summary = train_lib.train(EVALUATED, str(tmp_path), progress=False)
    assert summary["resumed_at_update"] == 8
    rows = _rows(tmp_path)
    assert rows[:, 0].tolist() == EVAL_STEPS
    assert [s for s, _ in _scalars(tmp_path, "eval/greedy_return")] == EVAL_STEPS
    assert summary["evaluations"] == 4
    assert summary["eval_greedy_best"] == rows[:, 2].max()


def _fake_best(path, env_steps):
    path.mkdir(parents=True)
    (path / "best.json").write_text(json.dumps(
        {"env_steps": env_steps, "update": env_steps // 16,
         "greedy_return": 9.0}))


@pytest.mark.parametrize("best_at, kept", [(128, True), (144, False)])
def test_a_best_policy_from_after_the_checkpoint_is_dropped(tmp_path, best_at,
                                                           kept):
    _fake_best(tmp_path / "policy_best", best_at)
    evaluation = evaluate_lib.TrainingEvaluation(EVALUATED, _model(), (2,),
                                                 str(tmp_path), 128)
    assert (tmp_path / "policy_best").exists() == kept
    assert evaluation.summary()["eval_best_env_steps"] == (
        best_at if kept else None)


def test_an_interrupted_swap_of_the_best_policy_is_completed(tmp_path):
    """Killed after the old best was moved aside and before the new one was
    in place: the old one comes back; a half-written new one is removed."""
    _fake_best(tmp_path / "policy_best.old", 64)
    _fake_best(tmp_path / "policy_best.tmp", 96)
    evaluate_lib.TrainingEvaluation(EVALUATED, _model(), (2,), str(tmp_path),
                                    128)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy_best"]
    assert json.loads((tmp_path / "policy_best" / "best.json").read_text())[
        "env_steps"] == 64


@pytest.mark.parametrize("field, value", [("eval_every", -1),
                                          ("eval_episodes", 0)])
def test_bad_evaluation_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"Config\.{field} must be an integer"):
        EVALUATED.replace(**{field: value})


def test_a_recurrent_policy_is_evaluated_with_its_core_state(tmp_path):
    config = EVALUATED.replace(core="lstm", core_size=8, hidden_sizes=(8,),
                               eval_every=96)
    summary = train_lib.train(config, str(tmp_path), progress=False)
    rows = _rows(tmp_path)
    assert rows[:, 0].tolist() == [96, 192]
    assert _evaluate(tmp_path / "policy_best") == summary["eval_greedy_best"]
    assert _evaluate(tmp_path / "policy") == summary["eval_greedy_last"]
