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
from rlexp.errors import ArgumentParser, ConfigError, RlexpError, RunError, in_range


def main(argv: list[str] | None = None) -> int:
    from rlexp.rewards.server import FAULTS

    p = ArgumentParser(prog="python -m rlexp.serve_reward", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=in_range(int, 0, 65535), default=8000, help="0: any free port")
    p.add_argument("--reward", default="math", help="registered reward name (math, format, arith_correct, ...)")
    p.add_argument("--function", default=None, help="module:function or file.py:function (batch signature)")
    p.add_argument("--fault-rate", type=in_range(float, 0, 1), default=0.0, help="share of requests to fail, [0, 1]")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated subset of {','.join(FAULTS)}")
    p.add_argument("--fault-delay-s", type=in_range(float, 0), default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--token-env", default=None, help="require 'Authorization: Bearer $TOKEN_ENV'")
    a = p.parse_args(argv)
    faults = tuple(f for f in a.faults.split(",") if f)
    if not faults or set(faults) - set(FAULTS):
        p.error(f"--faults={a.faults}: use a comma-separated subset of {','.join(FAULTS)}")
    return cli.command(lambda: _serve(a, faults))


def _serve(a: argparse.Namespace, faults: tuple[str, ...]) -> int:
    from rlexp.rewards.server import RewardServer, make_scorer

    token = os.environ.get(a.token_env) if a.token_env else None
    if a.token_env and token is None:
        raise RlexpError(f"--token-env={a.token_env}: the environment variable is not set; export it first")
    try:
        scorer = make_scorer(a.reward, a.function)
    except ConfigError as err:  # the reward layer names config keys; here the user typed an argument
        flag = "--function" if a.function else "--reward"
        what = "cannot load it" if a.function else "no such reward"
        raise RlexpError(f"{flag}={a.function or a.reward}: {what}; {err.fix}") from None
    try:
        server = RewardServer(
            (a.host, a.port),
            scorer,
            fault_rate=a.fault_rate,
            faults=faults,
            fault_delay_s=a.fault_delay_s,
            seed=a.seed,
            token=token,
        )
    except OSError as err:  # address in use, no such host: errors without a file name
        what = err.strerror or str(err)
        raise RunError(
            f"--port={a.port}: cannot listen on {a.host}:{a.port} ({what}); pick another port or host"
        ) from None
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
