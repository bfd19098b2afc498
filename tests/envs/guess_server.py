"""A guessing game served by OpenEnv's own server package, for the `env=openenv` tests (tests/envs/test_openenv*.py).

`python tests/envs/guess_server.py --port N` serves it on 127.0.0.1:N (`--host` elsewhere) with `openenv.core.env_server.create_app`
and uvicorn, as an OpenEnv environment's own `server/app.py` does. Each task (its `TaskProvider`: splits `train`
and `test`) hides a number from 1 to 9; `reset(split=, index=)` starts one, each step's `guess` is the model's
turn, the observation says `higher` or `lower`, and the last step's reward is 1 for a right guess (less 0.25 a
wrong guess before it), 0 after three wrong ones. `--mcp` serves the same game as MCP tools (`guess(n)`), the
OpenEnv way: actions are `CallToolAction`s, the reward and the end come on the tool call's observation.

Faults on purpose, each by the task's split or a flag: split `slow` answers a step after `--slow-s` seconds,
split `nanreward` ends with a NaN reward, split `malformed` sends an observation whose text is no text, and the
server exits (code 3) at its first step once the file `--die-when` names exists (a server dying mid-run).
`--step-latency-s` delays every step (a remote environment's round trip). `--log path` appends every step
(task, guess, observation, reward, done) as a JSON line: the tests compare rlexp's numbers with the server's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_app

try:
    from tests.envs.guess import SPLITS, target
except ImportError:  # run as a script from elsewhere than the checkout's root
    from guess import SPLITS, target  # type: ignore[no-redef]

OPTS: dict[str, Any] = {"log": None, "die_when": None, "slow_s": 0.0, "step_latency_s": 0.0}


class GuessAction(Action):
    guess: str


class GuessObservation(Observation):
    text: Any = None  # a string, except on split `malformed`


class GuessGame(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.split, self.index, self.tries, self.over = "train", 0, 0, False
        self._state = State(episode_id=None, step_count=0)

    # -- the TaskProvider protocol --------------------------------------------------------------------------
    def list_splits(self) -> list[str]:
        return list(SPLITS)

    def num_tasks(self, split: str) -> int:
        return SPLITS[split]

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        if not 0 <= index < SPLITS[split]:
            raise IndexError(index)
        return {"id": f"{split}-{index}", "split": split, "index": index}

    # -- the episode ---------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> GuessObservation:
        self.split, self.index = str(kw.get("split", "train")), int(kw.get("index", 0))
        self.tries, self.over = 0, False
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(text="guess my number from 1 to 9", done=False, reward=None)

    def play(self, guess: str) -> GuessObservation:
        if OPTS["die_when"] and os.path.exists(OPTS["die_when"]):
            os._exit(3)  # a server dying mid-run
        time.sleep(OPTS["step_latency_s"])  # a remote environment's round trip (each session in a thread of its own)
        if self.split == "slow":
            time.sleep(OPTS["slow_s"])
        self._state.step_count += 1
        digits = re.findall(r"\d", guess)
        want = target(self.split, self.index)
        obs = GuessObservation(text="say a number", done=False, reward=None)
        if digits:
            n = int(digits[0])
            self.tries += 1
            if n == want:
                obs = GuessObservation(text="right", done=True, reward=1.0 - 0.25 * (self.tries - 1))
            else:
                obs = GuessObservation(text="higher" if n < want else "lower", done=False, reward=None)
        if not obs.done and self.tries >= 3:
            obs = GuessObservation(text=f"no, it was {want}", done=True, reward=0.0)
        if obs.done and self.split == "nanreward":
            obs.reward = float("nan")
        if self.split == "malformed":
            obs.text = {"not": "text"}
        self._log(guess, obs)
        return obs

    def step(self, action: GuessAction, timeout_s: float | None = None, **kw: Any) -> GuessObservation:
        return self.play(action.guess)

    def _log(self, guess: str, obs: GuessObservation) -> None:
        if OPTS["log"]:
            row = {"task": f"{self.split}-{self.index}", "guess": guess, "text": obs.text, "reward": obs.reward}
            with open(OPTS["log"], "a") as f:
                f.write(json.dumps({**row, "done": obs.done}) + "\n")

    @property
    def state(self) -> State:
        return self._state


def mcp_game() -> type:
    """The same game whose move is the MCP tool `guess(n)` (OpenEnv's MCPEnvironment over FastMCP)."""
    from fastmcp import FastMCP
    from openenv.core.env_server import CallToolObservation, MCPEnvironment

    class McpGuessGame(MCPEnvironment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            mcp, game = FastMCP("guess"), GuessGame()
            self.game, self.last = game, None

            @mcp.tool()
            def guess(n: int) -> str:
                """Guess the hidden number.

                Args:
                    n: a number from 1 to 9
                """
                self.last = game.play(str(n))
                return str(self.last.text)

            super().__init__(mcp)

        def list_splits(self) -> list[str]:
            return self.game.list_splits()

        def num_tasks(self, split: str) -> int:
            return self.game.num_tasks(split)

        def get_task(self, split: str, index: int) -> dict[str, Any]:
            return self.game.get_task(split, index)

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any) -> Observation:
            return self.game.reset(seed, episode_id, **kw)

        @property
        def state(self) -> State:
            return self.game.state

        async def step_async(self, action: Any, timeout_s: float | None = None, **kw: Any) -> Observation:
            self.last = None
            obs = await super().step_async(action, timeout_s=timeout_s, **kw)
            if isinstance(obs, CallToolObservation) and self.last is not None:  # the move's end and reward
                obs.done, obs.reward = self.last.done, self.last.reward
            return obs

        def _step_impl(self, action: Any, timeout_s: float | None = None, **kw: Any) -> Observation:
            return GuessObservation(text="call the guess tool", done=False, reward=None)

    return McpGuessGame


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")  # 0.0.0.0 in the tests' container image
    parser.add_argument("--log")
    parser.add_argument("--die-when")
    parser.add_argument("--slow-s", type=float, default=5.0)
    parser.add_argument("--step-latency-s", type=float, default=0.0)
    parser.add_argument("--mcp", action="store_true")
    args = parser.parse_args()
    OPTS.update(log=args.log, die_when=args.die_when, slow_s=args.slow_s, step_latency_s=args.step_latency_s)
    import uvicorn

    if args.mcp:
        from openenv.core.env_server import CallToolAction

        game, action = mcp_game(), CallToolAction
    else:
        game, action = GuessGame, GuessAction
    app = create_app(game, action, GuessObservation, env_name="guess", max_concurrent_envs=256)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
