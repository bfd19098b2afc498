"""`python -m rlexp.export <run dir | checkpoints/actor/<step>> --out <dir>`: a Hugging Face model folder.

Loads the run's base model, restores the actor checkpoint (merging LoRA adapters), and writes
model.safetensors with the base checkpoint's config.json and tokenizer files (rlexp.families.export).
"""

from __future__ import annotations

import logging
import sys

from rlexp import cli
from rlexp.errors import ArgumentParser

log = logging.getLogger("rlexp.export")  # by name: run as __main__ by python -m


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rlexp.export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="run dir (latest checkpoint) or <run dir>/checkpoints/actor/<step>")
    parser.add_argument("--out", required=True, help="folder to write the Hugging Face model into")
    args = parser.parse_args(argv)

    def run() -> int:
        from rlexp.families.export import export

        dest = export(args.checkpoint, args.out)
        log.info("wrote %s (model.safetensors, config.json, tokenizer)", dest)
        return 0

    return cli.command(run)


if __name__ == "__main__":
    sys.exit(main())
