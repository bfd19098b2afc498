"""rlexp.config.load.register_configs: idempotent and cheap when called again, and it stores its schemas again
when Hydra's ConfigStore lost them."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from rlexp.config.load import compose, register_configs


def test_registering_again_keeps_the_entries_and_a_lost_one_is_stored_again() -> None:
    register_configs()
    repo = ConfigStore.instance().repo
    root, trainer = repo["rlexp_schema.yaml"], repo["trainer"]["trainer_schema.yaml"]
    register_configs()  # a second call (the launcher plugins' import) leaves the same entries
    assert repo["rlexp_schema.yaml"] is root and repo["trainer"]["trainer_schema.yaml"] is trainer
    repo.pop("rlexp_schema.yaml")
    register_configs()
    assert "rlexp_schema.yaml" in repo and repo["rlexp_schema.yaml"] is not root
    assert compose(["trainer.max_steps=3"]).trainer.max_steps == 3
