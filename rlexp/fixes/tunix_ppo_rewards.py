"""Fix: Tunix 0.1.7's PPO learner truncates every reward to an integer before GAE.

It builds the per-token rewards as `jnp.zeros_like(completion_ids)` (int32) and adds the completion's score at
its last token, so a score of 1.1 trained as 1, 0.1 as 0 and -0.5 as 0 (JAX warns that the float32 scatter into
int32 is unsafe). The replacement is Tunix's function with that one array made float32; nothing else changes.
It is rebuilt from Tunix's own source at install, so the fingerprint guards exactly the code that runs.
"""

from __future__ import annotations
import __future__

import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from tunix.rl.ppo import ppo_learner

from rlexp.compat import patching

TARGET = patching.Target(ppo_learner.PPOLearner, "_generate_and_compute_advantage", "122cb481a8d75817")
INT_REWARDS = "rewards = jnp.zeros_like(jax_completion_ids)"
FLOAT_REWARDS = "rewards = jnp.zeros_like(jax_completion_ids, dtype=jnp.float32)"


def _float_rewards(tunix_fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = inspect.unwrap(tunix_fn)
    lines, first = inspect.getsourcelines(fn)
    source = textwrap.dedent("".join(lines))
    assert source.count(INT_REWARDS) == 1  # the fingerprint pins the source; this names the line it changes
    namespace: dict[str, Any] = {}
    # compiled as Tunix's module is (postponed annotations), at its own line numbers for tracebacks
    text = "\n" * (first - 1) + source.replace(INT_REWARDS, FLOAT_REWARDS)
    flags = __future__.annotations.compiler_flag
    code = compile(text, inspect.getsourcefile(fn) or "<tunix>", "exec", flags=flags, dont_inherit=True)
    exec(code, tunix_fn.__globals__, namespace)  # noqa: S102 - Tunix's own source, one array's dtype changed
    return namespace[tunix_fn.__name__]


def install() -> None:
    patching.install("tunix_ppo_rewards", [(TARGET, 50, _float_rewards)], patching.REINSTALL)
