"""A model option's rules that its family decides, run by `rlexp.checks.check_config` before anything loads:
the extra keys the family needs, base vs instruction-tuned hub releases, and what the family's implementation
supports (PPO's critic, experts split over FSDP). Pure Python."""

from __future__ import annotations

from rlexp.config.derived import resolve_mesh
from rlexp.config.model_rules import check_source
from rlexp.config.schema import ModelConfig, RlexpConfig
from rlexp.errors import ConfigError
from rlexp.families.registry import families, family_of


def hub_id_instruction_tuned(hf_id: str) -> bool | None:
    """Whether a hub id names an instruction-tuned release, from naming conventions; None if unknown."""
    name = hf_id.rsplit("/", 1)[-1].lower()
    if name.endswith("-it") or "instruct" in name or "-chat" in name:
        return True
    if "base" in name.split("-") or name.endswith("-base"):
        return False
    for spec in families().values():  # a release without a suffix: the family's own convention
        if name.startswith(spec.hub_prefixes) and spec.hub_plain_tuned is not None:
            return spec.hub_plain_tuned
    return None


def check_model_option(m: ModelConfig) -> None:
    """Rules on a model option that need no checkpoint: source, family, the family's extras, base vs -it hub id."""
    check_source(m)
    fam = family_of(m)
    missing = [k for k in fam.required_extra if k not in (m.extra or {})]
    if missing:
        need = ", ".join(f"extra.{k}" for k in missing)
        raise ConfigError("model.extra", sorted(m.extra or {}), f"family {fam.name} needs {need}")
    if m.hf_id and not m.path:
        tuned = hub_id_instruction_tuned(m.hf_id)
        if tuned is not None and tuned != m.instruction_tuned:
            kind = "an instruction-tuned" if tuned else "a base (pretrained)"
            raise ConfigError(
                "model.instruction_tuned",
                m.instruction_tuned,
                f"model.hf_id={m.hf_id} is {kind} checkpoint; set model.instruction_tuned={str(tuned).lower()} "
                "or pick the other hub id",
            )
    if m.num_heads % m.num_kv_heads:
        raise ConfigError("model.num_kv_heads", m.num_kv_heads, f"must divide model.num_heads={m.num_heads}")


def check_family(cfg: RlexpConfig) -> None:
    """The model option, and what the run asks of its family's implementation."""
    m, s = cfg.model, cfg.slice
    check_model_option(m)
    fam = family_of(m)
    experts = int(m.extra.get("num_experts") or 0) if fam.experts_over_fsdp else 0
    fsdp, _tp = resolve_mesh(s)
    if experts and s.kind == "tpu" and experts % fsdp:  # Tunix splits the experts over FSDP (expert parallelism)
        raise ConfigError("slice.mesh.fsdp", s.mesh.fsdp, f"the FSDP size {fsdp} must divide the {experts} experts")


def check_critic(m: ModelConfig, algorithm: str) -> None:
    """An algorithm with a critic (its spec's `needs_critic`: PPO) needs a family whose model hands out its final
    hidden states; rlexp.algorithms.registry.check_algorithm asks."""
    if not family_of(m).critic:
        able = [name for name, spec in families().items() if spec.critic]
        raise ConfigError(
            "trainer.algorithm",
            algorithm,
            f"{algorithm.upper()}'s critic reads the final hidden states, which Tunix 0.1.7's {m.family} model does "
            f"not expose; use a model of family {', '.join(able)}",
        )
