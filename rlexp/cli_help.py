"""`rlexp --help` (`python -m rlexp --help`): the commands, then every config group, its options, and each
option's one-line description.

The description is the first comment line of the option's YAML file, so adding an option
documents it in the same place.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

USAGE = """usage: rlexp [group=option ...] [key=value ...] [-m] [--cfg job] [-q | -v] [--debug] [--help]
       rlexp <command> [args ...]
  (python -m rlexp ... and python -m rlexp.<module> ... are the same commands)

  rlexp                          train the embedded default (tiny model, arithmetic, GRPO, CPU)
  rlexp trainer=dapo trainer.learning_rate=3e-6
  rlexp --cfg job                print the composed config without training
  rlexp -m trainer.beta=0,0.04   a sweep (one job per value)
  rlexp experiment=quick         apply an overlay from conf/experiment/
  rlexp slice=v6e-32 hydra.launcher.dry_run=true
                                 a TPU slice submits a JobSet to GKE; dry_run writes it only
  rlexp -m slice=gpu-8xh200 hydra/launcher=slurm   submit to Slurm (submitit)
  rlexp --hydra-help             Hydra's own flags

commands (rlexp <command> --help for each):
  validate <overrides>           the preflight: check the config, render prompts, score completions (rlexp.validate)
  report <sweep dir | run dirs>  an HTML report of a sweep or of runs (rlexp.report)
  export <run dir> --out <dir>   a Hugging Face model folder from a run's checkpoint (rlexp.export)
  eval <run dir | folder> [step] evaluate a checkpoint or exported folder, eval/<name>.json (rlexp.eval)
  jobs status|logs|cancel <dir>  follow the GKE JobSets and Slurm jobs a launch submitted (rlexp.jobs)
  serve-reward --reward <name>   the reference reward service for reward=http (rlexp.serve_reward)

flags of every command:
  -q, --quiet                    status lines on stderr: only warnings
  -v, --verbose                  status lines on stderr: debug lines too (hydra.verbose=true: every logger's)
  --debug                        keep an error's traceback instead of the one-line message
"""


def describe(option: Path) -> str:
    for line in option.read_text().splitlines():
        line = line.strip()
        if line.startswith("#") and not line.startswith("# @package"):
            return line.lstrip("#").strip()
    return ""


def group_table(conf_dir: Path) -> str:
    lines = []
    root = conf_dir / "config.yaml"
    defaults = {}
    for line in root.read_text().splitlines():
        if line.strip().startswith("- ") and ":" in line:
            group, _, opt = line.strip()[2:].partition(":")
            defaults[group.strip()] = opt.strip()
    groups = [p for p in conf_dir.iterdir() if p.is_dir() and p.name != "hydra"]
    groups += [p for p in (conf_dir / "hydra").glob("*") if p.is_dir()]  # hydra/launcher
    for group_dir in sorted(groups, key=lambda p: p.relative_to(conf_dir).as_posix()):
        group = group_dir.relative_to(conf_dir).as_posix()
        default = "basic (gke for TPU slices)" if group == "hydra/launcher" else defaults.get(group, "-")
        lines.append(f"\n{group} (default: {default})")
        if group == "hydra/launcher":  # launcher plugins register in code, not as files
            lines.append(f"  {'basic':<22} Hydra's local launcher: jobs run on this machine, one after another.")
            lines.append(
                f"  {'gke':<22} GKE JobSets with Pathways (TPU slices select it; dry_run=true only writes them)."
            )
        for opt in sorted(group_dir.glob("*.yaml"), key=lambda p: p.stem):
            lines.append(f"  {opt.stem:<22} {describe(opt)}")
    return "\n".join(lines)


def print_help() -> None:
    from rlexp.config.load import CONF_DIR

    print(USAGE)
    print("config groups and options:" + group_table(Path(CONF_DIR)))


def _overrides(args: list[str]) -> list[str]:
    """The config overrides of a `--cfg` command line (Hydra's own flags and hydra.* keys left out)."""
    skip = {"--cfg", "-c", "--package", "-p", "--resolve"}
    overrides, i = [], 0
    while i < len(args):
        if args[i] in skip:
            i += 2 if args[i] in ("--cfg", "-c", "--package", "-p") else 1
            continue
        if not args[i].startswith(("hydra.", "hydra/", "-")):
            overrides.append(args[i])
        i += 1
    return overrides


def check_before_printing(args: list[str]) -> tuple[int, Any]:
    """`--cfg job` shows the config a run would use, so it refuses first what that run would refuse
    (an undeclared `+key`, a value of the wrong type): (0, the typed config), or (the one-line error's exit
    status, None)."""
    from rlexp import cli
    from rlexp.algorithms.registry import check_keys
    from rlexp.config.load import compose, to_config
    from rlexp.config.values import check_values

    typed = None

    def check() -> int:
        nonlocal typed
        cli.check_command_line(args)  # grammar, options, keys, types: before composing
        overrides = _overrides(args)
        typed = to_config(compose(overrides))
        check_values(typed)  # single keys' values: ranges, known words, a negative price, a zero model size
        check_keys(typed.trainer)  # the algorithm's keys: e.g. a KL coefficient for DAPO, which has no KL term
        log.debug("--cfg: %d override(s) composed and checked against the schema: %s", len(overrides), overrides)
        return 0

    return cli.command(check), typed


def print_memory_estimate(conf: Any) -> None:
    """After `--cfg`: the per-chip memory estimate of the checked config, as a YAML comment line."""
    from rlexp.estimates.memory import estimate_memory, format_estimate

    try:
        est = estimate_memory(conf)
    except Exception:  # noqa: BLE001 - advisory only
        return
    print(f"# {format_estimate(est)}")
