"""From the command line's overrides to a typed `RlexpConfig`: the config dir, the ConfigStore, one converter.

Everything that composes a config (the Hydra apps, `--help`, scripts, tests, the launcher plugin)
uses `CONF_DIR` and `register_configs()` from here, and turns a composed DictConfig (or an already
resolved dict) into the dataclass tree with `to_config`. Pure Python: no JAX.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from rlexp.config.schema import GROUP_SCHEMAS, RlexpConfig
from rlexp.errors import ConfigError, user_errors_from_resolvers

# The installed image keeps conf/ outside the package (RLEXP_CONF_DIR); a checkout finds it beside rlexp/.
CONF_DIR = os.environ.get("RLEXP_CONF_DIR", str(Path(__file__).resolve().parents[2] / "conf"))


def register_configs() -> None:
    """Register the root schema, one `<group>_schema` per group, the TPU slice base, the launcher settings
    and rlexp's resolvers. Idempotent: the Hydra apps, the launcher plugin and tests all call it."""
    from rlexp.config.hardware import register_resolvers, tpu_slice_node
    from rlexp.config.launcher import GkeLauncherConf, SweeperConf

    cs = ConfigStore.instance()
    register_resolvers()
    if _STORED and cs.repo.get("rlexp_schema.yaml") is _STORED["root"]:  # a run's process calls it 3 times (0.05 s)
        return
    cs.store(name="rlexp_schema", node=RlexpConfig)
    for group, schema in GROUP_SCHEMAS.items():
        cs.store(group=group, name=f"{group}_schema", node=schema)
    cs.store(group="slice", name="tpu_schema", node=tpu_slice_node())
    # TPU slices select hydra/launcher=gke in their defaults list, so it must exist whenever slices compose
    cs.store(group="hydra/launcher", name="gke", node=GkeLauncherConf, provider="rlexp")
    # the default sweeper: conf/hydra_choices.yaml
    cs.store(group="hydra/sweeper", name="rlexp", node=SweeperConf, provider="rlexp")
    _STORED["root"] = cs.repo.get("rlexp_schema.yaml")


_STORED: dict[str, Any] = {}  # the ConfigStore entry the last registration made (stored again if replaced)


def to_config(cfg: DictConfig | dict) -> RlexpConfig:
    """The typed dataclass tree of a composed DictConfig (interpolations resolved), or of a resolved dict.

    A composed DictConfig has had its types checked by OmegaConf; a resolved dict (the launcher's fast
    sweep path) comes from such a DictConfig, so it is only re-assembled into dataclasses.
    """
    from rlexp.redact import note_config

    note_config(cfg)  # the keys and `*_env` variables it names are scrubbed from every output from now on
    if isinstance(cfg, dict):
        return _typed(cfg, RlexpConfig)
    from rlexp.config.keys import check_declared

    check_declared(cfg)  # `+trainer.learning_rat=...` would otherwise train with the typo ignored
    try:
        with user_errors_from_resolvers():
            return OmegaConf.to_object(cfg)  # type: ignore[return-value]
    except MissingMandatoryValue as err:
        raise ConfigError(err.full_key, "???", "this option needs a value; set it on the command line") from None


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """Compose `conf/config.yaml` with overrides through Hydra's public compose API (no Hydra app running)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return hydra_compose("config", overrides=list(overrides))


_SECRET = re.compile(r"(token|secret|password|api_key|apikey)", re.IGNORECASE)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"trainer": {"beta": 0.04}} → {"trainer.beta": 0.04}; lists stay values; secret-looking keys are dropped."""
    out: dict[str, Any] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            if _SECRET.search(str(key)) and isinstance(value, str):
                continue
            out.update(flatten(value, name) if isinstance(value, dict) else {name: value})
    else:
        out[prefix] = tree
    return out


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _typed(resolved: dict, cls: type) -> Any:
    hints = _hints(cls)
    return cls(**{name: _convert(value, hints.get(name)) for name, value in resolved.items()})


def _convert(value: Any, hint: Any) -> Any:
    if isinstance(value, dict) and dataclasses.is_dataclass(hint):
        return _typed(value, hint)
    if isinstance(value, list):
        args = typing.get_args(hint)
        if args and dataclasses.is_dataclass(args[0]):
            return [_typed(v, args[0]) if isinstance(v, dict) else v for v in value]
    return value
