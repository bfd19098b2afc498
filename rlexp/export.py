"""`python -m rlexp.export <run dir | checkpoints/actor/<step>> --out <dir> [--adapter]`: a Hugging Face model folder.

Loads the run's base model, restores the actor checkpoint (merging LoRA adapters), and writes model.safetensors
with the base checkpoint's config.json, a tokenizer that adds BOS as rlexp's sampler does, the run's chat template,
generation_config.json with the eval's sampling, and a model card (rlexp.families.export, rlexp.models.export_extras).
`--adapter`: a LoRA run's adapters as a PEFT folder instead (rlexp.models.export_peft). --out must be new, empty,
or a folder rlexp wrote (its .rlexp-output marker): a folder of other files is refused, not overwritten.
"""

from __future__ import annotations

import logging
import shlex
import sys

from rlexp import cli
from rlexp.errors import ArgumentParser

log = logging.getLogger("rlexp.export")  # by name: run as __main__ by python -m


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rlexp.export", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="run dir (latest checkpoint) or <run dir>/checkpoints/actor/<step>")
    parser.add_argument("--out", required=True, help="folder to write into: new, empty, or one rlexp wrote before")
    parser.add_argument(
        "--adapter",
        action="store_true",
        help="a LoRA run (trainer.lora.rank>0): write its adapters as a PEFT folder instead of merged weights",
    )
    args = parser.parse_args(argv)
    command = shlex.join(["rlexp", "export", *(sys.argv[1:] if argv is None else argv)])

    def run() -> int:
        from pathlib import Path

        from rlexp.families.export import export
        from rlexp.models.export import find_checkpoint
        from rlexp.storage import check_output_dir
        from rlexp.train.checkpoints import check_restorable
        from rlexp.train.evaluate import eval_sampling

        check_output_dir(Path(args.out).expanduser(), key="--out")  # a folder rlexp did not write: refused first
        _, root, step = find_checkpoint(Path(args.checkpoint).expanduser())
        check_restorable(root, step, "export another step ({steps})")  # a lost or cut file, named before loading
        dest = export(args.checkpoint, args.out, adapter=args.adapter, sampling=eval_sampling, command=command)
        what = "adapter_model.safetensors (PEFT)" if args.adapter else "model.safetensors, config.json"
        log.info("wrote %s (%s, tokenizer, generation_config.json, README.md)", dest, what)
        return 0

    return cli.command(run)


if __name__ == "__main__":
    sys.exit(main())
