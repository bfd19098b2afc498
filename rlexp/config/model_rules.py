"""Rules on a model option that hold whatever its family: where its weights are. Pure Python; a family's own
rules (its extra keys, its hub releases, what it supports) are its spec's (`rlexp.families.rules`)."""

from __future__ import annotations

from rlexp.config.schema import ModelConfig
from rlexp.errors import ConfigError


def check_source(m: ModelConfig) -> None:
    """A model option must say where its weights are."""
    if not (m.path or m.hf_id):
        raise ConfigError("model.path", m.path, "set model.path (folder or gs://) or model.hf_id")
