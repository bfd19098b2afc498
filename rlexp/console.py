"""`rlexp`, the console script: `rlexp <overrides...>` is `python -m rlexp <overrides...>`, and
`rlexp <command> <args...>` is `python -m rlexp.<module> <args...>` for the commands below.

The command's module runs as `python -m` runs it (runpy, as `__main__`), so flags, output, the one-line errors and
exit statuses are the module's own. Any other first word goes to the Hydra app, which reads it as an override
(a word without `=` fails there as one line, exit 2).
"""

from __future__ import annotations

import runpy
import sys

COMMANDS = {
    "validate": "rlexp.validate",
    "report": "rlexp.report",
    "export": "rlexp.export",
    "eval": "rlexp.eval",
    "jobs": "rlexp.jobs",
    "serve-reward": "rlexp.serve_reward",
}


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] in COMMANDS:
        module, args = COMMANDS[args[0]], args[1:]
    else:
        module = "rlexp"
    sys.argv = [sys.argv[0], *args]  # runpy replaces argv[0] with the module's file, as `python -m` does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
