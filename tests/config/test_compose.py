"""Every option of every group composes into the typed schema; the default validates."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlexp.config.load import CONF_DIR, to_config
from rlexp.config.schema import GROUP_SCHEMAS, RlexpConfig
from rlexp.config.validate import validate
from tests.helpers import compose_cfg, compose_conf, conf_options

GROUPS = [g for g in GROUP_SCHEMAS if (Path(CONF_DIR) / g).is_dir()]


def test_every_group_has_options() -> None:
    for group in ("model", "dataset", "slice", "reward", "chat_template", "trainer", "logger"):
        assert conf_options(group), f"conf/{group}/ has no options"
    assert set(conf_options("trainer")) >= {"grpo", "dapo", "drgrpo", "gspo", "ppo"}


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in conf_options(g)])
def test_option_composes_typed(group: str, option: str) -> None:
    cfg = compose_cfg([f"{group}={option}"])
    # Options may leave values for the user to fill (???); they must belong to the option's group.
    for key in OmegaConf.missing_keys(cfg):
        assert key.startswith(f"{group}."), f"{group}={option} leaves {key} unset"
        OmegaConf.update(cfg, key.replace("[", ".").replace("]", ""), "placeholder", force_add=True)
    conf = to_config(cfg)
    assert isinstance(conf, RlexpConfig)
    node = getattr(conf, group)
    assert isinstance(node, GROUP_SCHEMAS[group]), f"{group}={option} is not typed by {GROUP_SCHEMAS[group].__name__}"


@pytest.mark.parametrize("option", conf_options("experiment"))
def test_experiment_overlay_composes(option: str) -> None:
    assert isinstance(compose_conf([f"experiment={option}"]), RlexpConfig)


def test_default_is_the_documented_composition() -> None:
    conf = compose_conf()
    assert (conf.model.name, conf.dataset.name, conf.slice.name) == ("tiny", "arith", "cpu")
    assert (conf.reward.name, conf.chat_template.name, conf.trainer.algorithm) == ("arith", "plain", "grpo")
    validate(conf)


@pytest.mark.parametrize("algorithm", ["grpo", "dapo", "drgrpo", "gspo", "ppo"])
def test_trainer_options_validate_with_default_groups(algorithm: str) -> None:
    conf = compose_conf([f"trainer={algorithm}"])
    assert conf.trainer.algorithm == algorithm
    validate(conf)


def test_wrong_type_is_rejected_at_composition() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="learning_rate"):
        compose_conf(["trainer.learning_rate=fast"])


def test_unknown_key_is_rejected_at_composition() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="learning_rat"):
        compose_conf(["trainer.learning_rat=1e-3"])
