"""`python -m rlexp.serve_reward --reward math --port 8000`: the reference reward service for `reward=http`.

Scores with any registered reward (`--reward math`, `format`, `arith_correct`) or a user function
(`--function module:function`); `--fault-rate 0.3 --faults timeout,5xx,nan` rehearses failures;
`--latency-s 0.05` answers every request that much later (a remote scorer's latency);
`--token-env NAME` requires `Authorization: Bearer $NAME`; `--kwarg model=Qwen/Qwen3-8B` (repeated) gives the reward
its kwargs, as `reward.functions.0.kwargs.*` does in a config (rlexp.rewards.server).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

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
    p.add_argument("--latency-s", type=in_range(float, 0), default=0.0, help="every answer takes this long")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--token-env", default=None, help="require 'Authorization: Bearer $TOKEN_ENV'")
    p.add_argument(
        "--kwarg", action="append", default=[], metavar="KEY=VALUE", help="a kwarg of --reward (YAML value), repeatable"
    )
    a = p.parse_args(argv)
    faults = tuple(f for f in a.faults.split(",") if f)
    if not faults or set(faults) - set(FAULTS):
        p.error(f"--faults={a.faults}: use a comma-separated subset of {','.join(FAULTS)}")
    kwargs = {}
    for item in a.kwarg:
        key, eq, value = item.partition("=")
        if not eq or not key.isidentifier():
            p.error(f"--kwarg={item}: give it as KEY=VALUE, e.g. --kwarg model=Qwen/Qwen3-8B")
        kwargs[key] = _yaml_value(value)
    if kwargs and a.function:
        p.error(f"--kwarg={a.kwarg[0]}: kwargs are --reward's; a --function takes none")
    return cli.command(lambda: _serve(a, faults, kwargs))


def _yaml_value(text: str) -> Any:
    """A kwarg's value as a config override reads it: numbers, booleans, lists; anything else a string."""
    import yaml

    try:
        return yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        return text


def _serve(a: argparse.Namespace, faults: tuple[str, ...], kwargs: dict[str, Any]) -> int:
    from rlexp.rewards.server import RewardServer, make_scorer

    token = os.environ.get(a.token_env) if a.token_env else None
    if a.token_env and token is None:
        raise RlexpError(f"--token-env={a.token_env}: the environment variable is not set; export it first")
    try:
        scorer = make_scorer(a.reward, a.function, kwargs)
    except ConfigError as err:  # the reward layer names config keys; here the user typed an argument
        raise RlexpError(_as_arguments(a, err, kwargs)) from None
    try:
        server = RewardServer(
            (a.host, a.port),
            scorer,
            fault_rate=a.fault_rate,
            faults=faults,
            fault_delay_s=a.fault_delay_s,
            latency_s=a.latency_s,
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


def _as_arguments(a: argparse.Namespace, err: ConfigError, kwargs: dict[str, Any]) -> str:
    """The reward layer's error in the words of this command's arguments: a kwarg of the config
    (`reward.functions[].kwargs.model`) is `--kwarg model=...` here."""
    if a.function:
        return f"--function={a.function}: cannot load it; {err.fix}"
    if err.key == "reward.functions[].fn":
        return f"--reward={a.reward}: no such reward; {err.fix}"
    name = err.key.rpartition("kwargs.")[2] if "kwargs." in err.key else None
    if name is None:  # a kwarg the factory does not take
        return f"--reward={a.reward} --kwarg: {err.fix}"
    if name not in kwargs:
        return f"--reward={a.reward}: --kwarg {name} is missing: {err.fix}; give it as --kwarg {name}=<value>"
    return f"--reward={a.reward} --kwarg {name}={err.value!r}: {err.fix}"


if __name__ == "__main__":
    sys.exit(main())
