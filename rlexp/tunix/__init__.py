"""The one seam to Tunix's internals: every adapter that reaches or overrides a private name of Tunix 0.1.7
lives in this package (and the patches of rlexp.fixes and rlexp.perf), each private named in `privates.PRIVATES`
with the fingerprint of the source it was written against. docs/tunix.md says what each is for and what an
upgrade to Tunix's main branch changes.

- `imports`: Tunix's package `__init__` deferred (imported by `rlexp` itself: nothing of Tunix here);
- `checkpoints`: the Hugging Face key mappings of Tunix's loaders (models);
- `trainer`: the actor trainer's metrics flush, progress bar, restored metadata, LoRA flag and profiler;
- `sampler`: the lean sampler (`perf.patches=lean_sampler`), the recording cluster, the classes a run used;
- `learners`: DAPO's and agent=tools' hooks into the GRPO-family learners;
- `privates`: the table and its check.

The facade below is what a training session calls; it imports Tunix only when called.
"""

from __future__ import annotations

from typing import Any


def check(conf: Any) -> None:
    """At a run's start: every Tunix private this run will reach is the source rlexp was written against, or a
    one-line PatchGuardError naming it and what to do."""
    from rlexp.tunix.privates import check as check_privates

    check_privates(conf)


def ran_classes(cluster: Any, learner: Any) -> dict[str, str]:
    """summary.json's `perf.classes`: qualified names of the sampler, rollout, learner and cluster that ran."""
    from rlexp.tunix.sampler import ran_classes as classes

    return classes(cluster, learner)
