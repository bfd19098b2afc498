"""rlexp.config.overrides: what the command line's overrides get wrong is refused before Hydra composes, in rlexp's
words (no Hydra text read); what only composing can judge passes through."""

from __future__ import annotations

import pytest

from rlexp.config.load import CONF_DIR, register_configs
from rlexp.config.overrides import check_overrides, groups, options, value_kind
from rlexp.errors import RlexpError

register_configs()

REFUSED = [
    # grammar: Hydra's own parser, rlexp's reason
    ("trainer.beta", "trainer.beta: not a valid override (no = between the key and its value)"),
    ("trainer.learning_rate=1e-3,,3e-3", "(an empty item in a list of values)"),
    ("trainer.learning_rate=range(1,", "trainer.learning_rate=range(1,: not a valid override (a bracket left open)"),
    ("run_name=${x", "(a bracket left open)"),
    # groups and options
    ("model=qwen3_06b", "model='qwen3_06b': no such option; did you mean qwen3_0_6b? use one of gemma4_26b_a4b,"),
    ("experiment=nosuch", "experiment='nosuch': no such option"),
    ("trainer=[grpo,nosuch]", "trainer='nosuch': no such option"),
    ("model=null", "model=None: a group takes one option's name; use one of gemma4_26b_a4b"),
    ("experiment=null", "or leave it out with ~experiment"),
    ("sweep=lr_beta", "sweep='lr_beta': sweep is not in the defaults list; add it with +sweep=lr_beta"),
    # keys
    ("trainer.learning_rat=1e-3", "trainer.learning_rat='1e-3': no such key; did you mean trainer.learning_rate?"),
    ("+trainer.learning_rat=1e-3", "trainer.learning_rat=0.001: no such key; did you mean trainer.learning_rate?"),
    ("++trainer.lr=1", "did you mean trainer.learning_rate?"),
    ("dataset.path=x", "did you mean dataset.source?"),
    ("nosuch=1", "nosuch='1': no such key"),
    ("trainer.beta.x=1", "trainer.beta.x='1': trainer.beta holds one value, not keys; set trainer.beta=<value>"),
    (
        "reward.functions.0.wieght=2",
        "reward.functions.0.wieght='2': no such key; did you mean reward.functions.weight?",
    ),
    ("+trainer.beta=0.1", "trainer.beta=0.1: the key exists already; set it without the + (trainer.beta=0.1)"),
    ("~trainer.beta", "~trainer.beta: a key of the schema cannot be deleted"),
    ("~trainer.nothere", "trainer.nothere: cannot delete it, no such key"),
    # value types
    ("trainer.learning_rate=abc", "trainer.learning_rate='abc': Value 'abc' of type 'str' could not be converted"),
    ("trainer.max_steps=1.5", "trainer.max_steps='1.5': "),
    ("trainer.max_steps=true", "give an integer"),
    ("compile_cache.enabled=maybe", "compile_cache.enabled='maybe': "),
    ("trainer.top_k=abc", "give an integer or null"),
    ("trainer.eval_k=[1,x]", "'x' is not an integer; give null (each power of two up to trainer.eval_samples)"),
    ("trainer.eval_k=[]", "trainer.eval_k='[]': an empty list reports no k"),
    ("trainer.eval_k=1.5", "trainer.eval_k='1.5': 1.5 is not an integer"),
    ("trainer.lora.rank=[1,2]", "give an integer"),
    ("trainer.learning_rate=null", "trainer.learning_rate='null': "),
    ("reward.functions.0.weight=heavy", "reward.functions.0.weight='heavy': "),
    # a sweep needs -m
    ("trainer.beta=0,0.04", "trainer.beta=0,0.04: a sweep, one job per value; add -m (--multirun)"),
]


@pytest.mark.parametrize(("override", "says"), REFUSED)
def test_a_bad_override_is_refused_before_composing(override: str, says: str) -> None:
    with pytest.raises(RlexpError) as caught:
        check_overrides([override], CONF_DIR)
    assert says in str(caught.value), str(caught.value)
    assert caught.value.exit_code == 2


PASSED = [
    "trainer=dapo",
    "model=qwen3_0_6b",
    "+sweep=lr_beta",
    "~experiment",
    "trainer.learning_rate=3e-6",
    "trainer.learning_rate=1",  # an int where a float goes: OmegaConf converts it, so does composing
    "trainer.max_steps='5'",
    "compile_cache.enabled=yes",
    "trainer.beta=null",
    "trainer.eval_k=[1,2]",
    "trainer.eval_k=4",  # an Any field with rlexp's own check: one k (OmegaConf refused it as no ListConfig)
    "trainer.eval_k=null",
    "perf.patches=[]",
    "run_name=${model.name}",
    "model.num_layers=???",  # refused once composed, as an unset value
    "+model.extra.scale=2",  # free-form dicts: their keys are the composed config's
    "reward.functions.0.kwargs.url=http://x/",
    "reward.functions.0.weight=2",
    "hydra.run.dir=/tmp/x",  # Hydra's keys: Hydra's
    "hydra/launcher=slurm",
    "data_template.template='{question} ='",
    "seed=99999999999999999999",  # a value rule, not a type: rlexp.config.values refuses it
]


@pytest.mark.parametrize("override", PASSED)
def test_a_good_override_passes(override: str) -> None:
    check_overrides([override], CONF_DIR)


@pytest.mark.parametrize(
    "override", ["trainer.learning_rat=1,2", "trainer.beta=0,x", "trainer.beta=0,0.04", "seed=range(0,10,0)"]
)
def test_a_multirun_leaves_keys_and_values_to_each_job(override: str) -> None:
    """A sweep's jobs are composed one by one and a refused one is recorded in sweep.json (rlexp.launch)."""
    check_overrides([override], CONF_DIR, multirun=True)


@pytest.mark.parametrize(
    ("override", "says"),
    [("+sweep=nosuch", "sweep='nosuch': no such option"), ("trainer.beta=0,,1", "not a valid override")],
)
def test_a_multirun_is_refused_for_its_grammar_and_options(override: str, says: str) -> None:
    with pytest.raises(RlexpError, match=says):
        check_overrides([override], CONF_DIR, multirun=True)


def test_groups_and_options_are_conf_s_folders_and_files() -> None:
    assert {"model", "trainer", "sweep", "experiment"} <= groups(CONF_DIR) and "hydra" not in groups(CONF_DIR)
    assert "tiny" in options(CONF_DIR, "model") and "tpu_schema" in options(CONF_DIR, "slice")


def test_value_kinds() -> None:
    assert value_kind(float) == "a float" and value_kind(int | None) == "an integer or null"
    assert value_kind(list[str]) == "a list of strings, e.g. [a,b]" and value_kind(dict[str, int]) is None
