"""Model families are registered specs: a family registered from outside rlexp (here, a copy of llama3's spec under
a new name) is accepted by the config checks, the estimates, config.json checks and `rlexp --cfg job` without any
other file knowing it, and no generic code branches on a family's name."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from rlexp.checks import check_config
from rlexp.errors import ConfigError, RlexpError
from rlexp.estimates.cost import estimate_cost
from rlexp.estimates.flops import step_flops
from rlexp.estimates.memory import estimate_memory
from rlexp.families import registry
from rlexp.families.hf_config import check_hf_config, model_config_from_hf
from tests.helpers import REPO, compose_conf

NAME, MODEL_TYPE = "llama3_test", "llama_test"
LLAMA = ["model=llama3_1_8b", "slice=v5p-64", "trainer.batch_size=16", "trainer.max_steps=100"]
REGISTER = f"""
import dataclasses, sys
from rlexp.families import llama3, registry
registry.register(dataclasses.replace(llama3.SPEC, name={NAME!r}, hf_model_types=({MODEL_TYPE!r},)))
from rlexp.__main__ import entry
sys.argv = ["rlexp", *sys.argv[1:]]
entry()
"""


@pytest.fixture
def test_family() -> Iterator[registry.FamilySpec]:
    from rlexp.families import llama3

    spec = registry.register(dataclasses.replace(llama3.SPEC, name=NAME, hf_model_types=(MODEL_TYPE,)))
    yield spec
    registry.unregister(NAME)


def test_a_registered_family_is_checked_and_estimated_like_the_one_it_copies(test_family) -> None:
    ours, theirs = compose_conf([*LLAMA, f"model.family={NAME}"]), compose_conf(LLAMA)
    check_config(ours)  # extras, hub release, critic, experts, the memory fit: all asked of the spec
    assert ours.model.family == NAME
    mem = estimate_memory(ours)
    assert mem == estimate_memory(theirs) and mem["param_count"] == pytest.approx(8.03e9, rel=1e-3)
    assert estimate_cost(ours) == estimate_cost(theirs)
    assert step_flops(ours, 100.0) == step_flops(theirs, 100.0)
    with pytest.raises(ConfigError, match="PPO's critic"):  # the copy has llama3's rules: no critic
        check_config(compose_conf([*LLAMA, f"model.family={NAME}", "trainer=ppo"]))


def test_config_json_is_read_through_the_registered_model_types(test_family) -> None:
    hf = {
        "model_type": MODEL_TYPE,
        "num_hidden_layers": 2,
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "rope_theta": 5e5,
    }
    m = model_config_from_hf(hf, name="x")
    assert m.family == NAME and m.extra["rope_theta"] == 5e5
    check_hf_config(m, hf, "/ckpt")
    with pytest.raises(RlexpError, match=f"not a {NAME} checkpoint"):
        check_hf_config(m, {**hf, "model_type": "llama"}, "/ckpt")


def test_cfg_job_prints_the_estimate_of_a_family_registered_outside_rlexp() -> None:
    args = ["--cfg", "job", *LLAMA, f"model.family={NAME}"]
    out = subprocess.run([sys.executable, "-c", REGISTER, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"family: {NAME}" in out.stdout
    assert out.stdout.splitlines()[-1].startswith(
        "# memory per chip for llama3_1_8b on v5p-64 (16 trainer chips, 8.03B"
    )


def test_registering_a_taken_name_or_model_type_is_refused(test_family) -> None:
    from rlexp.families import llama3

    with pytest.raises(ValueError, match="registered twice"):
        registry.register(dataclasses.replace(llama3.SPEC, name=NAME))
    with pytest.raises(ValueError, match="model_type 'llama'"):
        registry.register(dataclasses.replace(llama3.SPEC, name="other"))
    assert "other" not in registry.families()


# `m.family == "gemma4"`, `family in ("qwen3", "gemma4")`, `family not in CRITIC_FAMILIES`-style tuples
FAMILY_BRANCH = re.compile(r"family\s*(==|!=)|family\s+(not\s+)?in\s*([(\[{]|[A-Z_]+\b)")


def test_no_generic_code_branches_on_a_family_name() -> None:
    """Only the family modules know a family; everything else asks the spec. The Tunix seam's table of privates is
    not generic code: its checkpoint-mapping rows name the Tunix model module a family's checkpoints load through,
    and are checked only for that family's runs."""
    hits = []
    for path in sorted((REPO / "rlexp").rglob("*.py")):
        if path == REPO / "rlexp" / "tunix" / "privates.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if FAMILY_BRANCH.search(line):
                hits.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not hits, "branches on a model family (ask rlexp.families.family_of(m) instead):\n" + "\n".join(hits)
