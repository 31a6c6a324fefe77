"""`Config`'s documentation and checks: one attribute line per field in its
group, no history in the docstrings, values that can only diverge refused,
and docs/reference/config.md as generated (tf_vtrace/agent/_config_reference.py)."""
import dataclasses
import inspect
import math
import pathlib
import re

import pytest

from tf_vtrace.agent import _config_docs, _config_reference, config, presets
from tf_vtrace.agent.config import Config

ROOT = pathlib.Path(__file__).resolve().parent.parent
GROUPS = ["The environment", "The loss", "The optimizer", "The network",
          "The actors", "The learner", "The run"]


def test_every_field_has_a_short_docstring_and_a_group_in_order():
    docs = _config_docs.field_docs()
    assert [d.name for d in docs] == [f.name for f in dataclasses.fields(Config)]
    seen = list(dict.fromkeys(d.group for d in docs))
    assert seen == GROUPS
    source = inspect.getsource(config)
    for doc in docs:
        assert doc.text, doc.name
        # At most two lines in the source (the docstring right after the field).
        match = re.search(rf'\n    {doc.name}: .*\n    """(.*?)"""', source, re.S)
        assert match and match.group(1).count("\n") <= 1, doc.name


@pytest.mark.parametrize("module", [config, presets])
def test_docstrings_hold_no_dates_or_history(module):
    source = inspect.getsource(module)
    # A citation's year (Young & Tian 2019) may stay; a date may not.
    months = "January|February|March|April|June|July|August|September|October|November|December"
    assert not re.search(rf"\b(?:{months})\b|UTC|(?<!_)measured|sitting|issue \d",
                         source, re.I), module.__name__


def test_the_defaults_are_keyword_only_and_unchanged():
    with pytest.raises(TypeError):
        Config("CartPole-v1")  # The fields are keyword-only.
    assert Config().to_dict() == dict(
        env_id="CartPole-v1", max_episode_steps=None, reward_clip=None,
        normalize_observations=False, scale_rewards=False, correction="vtrace",
        discount=0.99, entropy_cost=0.01,
        baseline_cost=0.5, vtrace_lambda=1.0, optimizer="rmsprop",
        learning_rate=8e-3,
        max_grad_norm=40., hidden_sizes=(64, 64), core="none", core_size=64,
        separate_value_core=False, state_dependent_std=False, backend="thread", num_actors=1,
        num_envs=16, unroll_length=20, vector_env="auto",
        actor_inference="auto", queue_size=8, policy_lag=0,
        max_actor_failures=3, strategy="none", jit_compile=True,
        updates_per_call=2, max_nonfinite_updates=10, total_env_steps=300_000,
        seed=0, checkpoint_every=None, checkpoint_every_s=30., eval_every=0,
        eval_episodes=10)


@pytest.mark.parametrize("field", ["learning_rate", "max_grad_norm",
                                   "entropy_cost", "baseline_cost", "discount",
                                   "reward_clip", "checkpoint_every_s",
                                   "vtrace_lambda"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_non_finite_number_is_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^Config\.{field} must be"):
        Config(**{field: value})


@pytest.mark.parametrize("changes, field", [
    (dict(discount=-0.01), "discount"), (dict(discount=1.01), "discount"),
    (dict(max_grad_norm=0.), "max_grad_norm"),
    (dict(baseline_cost=-1.), "baseline_cost"),
    (dict(reward_clip=0.), "reward_clip"),
    (dict(checkpoint_every_s=-1.), "checkpoint_every_s"),
    (dict(max_nonfinite_updates=0), "max_nonfinite_updates"),
    (dict(max_actor_failures=0), "max_actor_failures"),
    (dict(jit_compile="ture"), "jit_compile"),
    (dict(jit_compile=1), "jit_compile"),
    (dict(separate_value_core="yes"), "separate_value_core"),
    (dict(vector_env="pool"), "vector_env"),
])
def test_an_out_of_range_or_mistyped_value_is_refused_naming_the_field(changes, field):
    with pytest.raises(ValueError, match=rf"^Config\.{field} must be"):
        Config(**changes)


def test_the_edges_of_the_ranges_are_accepted():
    Config(discount=0., entropy_cost=0., baseline_cost=0., reward_clip=1e-3)
    Config(discount=1., jit_compile=False)


def test_the_preset_base_keeps_its_old_name():
    assert presets.DEFAULTS_AS_MEASURED is presets.PRESET_BASE
    for name, settings in presets.PRESETS.items():
        Config(**settings)
        if name != "cartpole":
            assert presets.PRESET_BASE.items() <= settings.items(), name


def test_the_reference_page_is_up_to_date():
    page = ROOT / "docs" / "reference" / "config.md"
    assert page.read_text(encoding="utf-8") == _config_reference.reference_page(), (
        "docs/reference/config.md is out of date with Config: run `python -m "
        "tf_vtrace.agent._config_reference docs/reference/config.md`")


def test_the_reference_page_has_a_row_per_field_and_preset():
    page = _config_reference.reference_page()
    for doc in _config_docs.field_docs():
        assert f"| `{doc.name}` | `{doc.flag}` |" in page
    for name in presets.PRESETS:
        assert f"| `{name}` |" in page
    # A constant named in a docstring shows as its value.
    assert "(1 to 4)" in page and "MAX_UPDATES_PER_CALL" not in page
    for flag in ["--out", "--restart", "--preset", "--sync", "--episodes", "--env-id"]:
        assert f"`{flag}`" in page, flag
