"""PPO's critic: a decoder of the actor's family with a value head on its final hidden states.

The backbone is the actor's checkpoint (`trainer.ppo.critic: null`) or another checkpoint of the same architecture
(the model option's dimensions are checked against its config.json, as the actor's). The head is one linear map
to a scalar per position, initialised to zero, so the first values are 0 and the first advantages are the
whitened returns. Tunix's `compute_score` calls it as it calls a policy and reads `[B, T, 1]` scores. Only a family
whose model hands out its final hidden states can carry it (`FamilySpec.critic`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlexp.config.schema import RlexpConfig
from rlexp.families.load import load_model
from rlexp.families.rules import check_critic


def load_critic(cfg: RlexpConfig, mesh: Any) -> Any:
    """The critic, sharded on `mesh`: trainer.ppo.critic's checkpoint (or the actor's) and a zero value head."""
    from flax import nnx

    check_critic(cfg.model, cfg.trainer.algorithm)
    option = cfg.model
    if cfg.trainer.ppo.critic:
        option = dataclasses.replace(option, path=cfg.trainer.ppo.critic, hf_id=None)
    backbone = load_model(option, mesh)

    class ValueModel(nnx.Module):
        def __init__(self, backbone: Any, embed_dim: int) -> None:
            self.backbone = backbone
            self.value_head = nnx.Linear(
                embed_dim, 1, use_bias=True, kernel_init=nnx.initializers.zeros_init(), rngs=nnx.Rngs(0)
            )

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            self.backbone(*args, **kwargs, output_hidden_states=True)
            hidden = nnx.pop(self.backbone, nnx.Intermediate)["all_hidden_states"].value[-1]
            return self.value_head(hidden.astype(self.value_head.kernel.value.dtype))

    with mesh:
        return ValueModel(backbone, option.embed_dim)
