"""JobSet names: deterministic from the experiment and the job's overrides, DNS-safe, at most 22 characters.

Pathways puts the name twice into the coordinator label (`<name>-pathways-head-0-0.<name>`, at most 63
characters), which caps it at 22. A readable prefix from the run name plus a hash of the overrides keeps names
unique within a sweep and stable across re-submissions, so resubmitting a sweep finds the JobSets it created.
A single run whose run_name is a valid name uses it as is (`jobset_name`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from rlexp.errors import ConfigError, RlexpError

MAX_NAME = 22
HASH_CHARS = 7
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns_prefix(text: str, limit: int) -> str:
    """Lower-case, alphanumerics and single dashes, starting with a letter, at most `limit` characters."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not s or not s[0].isalpha():
        s = "r" + s
    return s[:limit].rstrip("-") or "r"


def job_name(run_name: str, overrides: Sequence[str], prefix: str | None = None) -> str:
    """`<prefix>-<hash of run name and sorted overrides>`, at most 22 characters."""
    key = "\n".join([run_name, *sorted(overrides)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:HASH_CHARS]
    head = dns_prefix(prefix or run_name, MAX_NAME - HASH_CHARS - 1)
    return f"{head}-{digest}"


def jobset_name(run_name: str, overrides: Sequence[str], prefix: str | None = None, *, single: bool = False) -> str:
    """A single run whose run_name is already a valid JobSet name keeps it verbatim, so the seeds' monitoring
    commands (`kubectl get jobset -l gcluster.google.com/workload=<run_name>`) find it; a sweep's jobs (and a
    run with `name_prefix` or a run name that is not a DNS name) get `job_name`'s unique hash suffix."""
    if single and prefix is None and len(run_name) <= MAX_NAME and DNS_1035.match(run_name):
        return run_name
    return job_name(run_name, overrides, prefix)


def check_name(name: str) -> None:
    if len(name) > MAX_NAME or not DNS_1035.match(name):
        raise ConfigError(
            "hydra.launcher.name_prefix", name, f"JobSet names must match {DNS_1035.pattern} and be <= {MAX_NAME} chars"
        )


def unique_names(names: Sequence[str], overrides: Sequence[Sequence[str]], what: str = "JobSet") -> None:
    """Two jobs of one sweep with the same name (or run dir) would overwrite each other: refuse before submitting."""
    seen: dict[str, int] = {}
    for i, n in enumerate(names):
        if n in seen:
            a, b = " ".join(overrides[seen[n]]), " ".join(overrides[i])
            raise RlexpError(f"jobs {seen[n]} ({a}) and {i} ({b}) both map to {what} {n}: make their overrides differ")
        seen[n] = i
