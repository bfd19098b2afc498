"""`python -m rlexp.serve_reward --reward math --port 8000`: the reference reward service for `reward=http`.

Scores with any registered reward (`--reward math`, `format`, `arith_correct`) or a user function
(`--function module:function`); `--fault-rate 0.3 --faults timeout,5xx,nan` rehearses failures;
`--token-env NAME` requires `Authorization: Bearer $NAME` (rlexp.rewards.server).
"""

from __future__ import annotations

import argparse
import os
import sys

from rlexp import cli
from rlexp.errors import RlexpError


def main(argv: list[str] | None = None) -> int:
    from rlexp.rewards.server import FAULTS

    p = argparse.ArgumentParser(prog="python -m rlexp.serve_reward", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--reward", default="math", help="registered reward name (math, format, arith_correct, ...)")
    p.add_argument("--function", default=None, help="module:function or file.py:function (batch signature)")
    p.add_argument("--fault-rate", type=float, default=0.0)
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--fault-delay-s", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--token-env", default=None, help="require 'Authorization: Bearer $TOKEN_ENV'")
    a = p.parse_args(argv)
    return cli.command(lambda: _serve(a))


def _serve(a: argparse.Namespace) -> int:
    from rlexp.rewards.server import RewardServer, make_scorer

    token = os.environ.get(a.token_env) if a.token_env else None
    if a.token_env and token is None:
        raise RlexpError(f"--token-env {a.token_env}: the environment variable is not set; export it first")
    server = RewardServer(
        (a.host, a.port),
        make_scorer(a.reward, a.function),
        fault_rate=a.fault_rate,
        faults=tuple(f for f in a.faults.split(",") if f),
        fault_delay_s=a.fault_delay_s,
        seed=a.seed,
        token=token,
    )
    print(f"serving reward {a.function or a.reward} at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
