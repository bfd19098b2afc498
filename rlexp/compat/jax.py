"""JAX 0.10.2 internals rlexp relies on (jax is pinned in pyproject.toml).

- Exchanging a few bytes between the processes of a multi-process run, outside XLA: rlexp's step hooks decide
  together whether to stop (SIGTERM reaches a job's processes at different moments). JAX's coordination service
  (the key-value store and barriers orbax also uses) is reachable only through `jax._src.distributed.global_state`;
  `jax.experimental.multihost_utils` offers only XLA collectives, which met the step's own collectives on another
  process (2 CPU processes, gloo: "collective mismatch" abort in the first step).
"""

from __future__ import annotations


def exchange(key: str, value: str, timeout_ms: int) -> list[str]:
    """Publish `value` under `key` from this process, wait until every process did, return all their values.

    `key` must be new for each exchange (the store keeps values for the life of the runtime). Needs
    `jax.distributed.initialize`; the order of the returned values is not the process order.
    """
    import jax
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("jax.distributed is not initialised: there is no coordination service to exchange through")
    client.key_value_set(f"{key}/{jax.process_index()}", value)
    client.wait_at_barrier(f"{key}/barrier", timeout_in_ms=timeout_ms)
    return [v for _, v in client.key_value_dir_get(key)]
