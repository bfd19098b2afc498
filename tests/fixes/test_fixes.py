"""rlexp.fixes: importing a model family patches nothing; building a model installs Tunix's fixes; a fix's guard
fails in one line when the replaced Tunix source is not the one it was written against."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlexp import fixes
from rlexp.compat import patching
from tests.helpers import REPO

IMPORT_PROBE = """
import json
import rlexp.models.loader, rlexp.models.tunix_text, rlexp.models.gemma4, rlexp.models.lora, rlexp.train.cluster
import rlexp.families.critic, rlexp.algorithms.dapo, rlexp.algorithms.ppo, rlexp.algorithms.opd
from tunix.rl.ppo import ppo_learner
from tunix.models.gemma4 import model as gemma4
from tunix.models.llama3 import model as llama3
from tunix.models.qwen3 import model as qwen3
from tunix.sft import peft_trainer, sharding_utils
touched = [
    (m.__name__, name) for m, names in [
        (qwen3, ["apply_rope"]), (llama3, ["apply_rope"]), (sharding_utils, ["shard_input"]),
    ] for name in names if hasattr(getattr(m, name), "rlexp_patch")
] + [
    (c.__qualname__, name) for c in [qwen3.Einsum, qwen3.MLP, qwen3.Embedder, qwen3.Attention, qwen3.DecoderLayer,
        llama3.Einsum, llama3.MLP, llama3.Embedder, llama3.DecoderLayer, gemma4.Einsum, gemma4.FeedForward,
        peft_trainer.PeftTrainer, ppo_learner.PPOLearner]
    for name, value in vars(c).items() if hasattr(value, "rlexp_patch")
]
print(json.dumps(touched))
"""


@pytest.mark.slow
def test_importing_the_model_families_patches_nothing() -> None:
    out = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_building_a_model_installs_the_fixes_and_only_them() -> None:
    from rlexp.families.load import load_model
    from tests.helpers import compose_conf

    load_model(compose_conf([]).model, None)
    assert set(fixes.FIXES) <= patching.installed()
    from tunix.models.qwen3 import model as qwen3_lib

    assert qwen3_lib.apply_rope.rlexp_patch == "tunix_rope"


def test_a_fix_whose_tunix_source_changed_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlexp.fixes import tunix_remat

    changed = [patching.Target(t.owner, t.attr, "ffffffffffffffff") for t in tunix_remat.TARGETS]
    monkeypatch.setattr(tunix_remat, "TARGETS", tuple(changed))
    patching.uninstall("tunix_remat")
    try:
        with pytest.raises(patching.PatchGuardError, match=r"^fixes=tunix_remat: tunix\.models\.qwen3\.model\."):
            tunix_remat.install()
    finally:
        monkeypatch.undo()
        tunix_remat.install()
