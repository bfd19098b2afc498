"""`python -m rlexp.validate <overrides>`: the preflight before a launch (rlexp.checks.preflight).

Checks the config, loads the dataset, renders `validate.rows` prompts, samples completions (or reads
`validate.completions`) and calls every reward; writes `validation.json` to the run dir. Exit status 1
when a check fails, 2 for a user error in the command itself.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from rlexp import cli
from rlexp.config.load import CONF_DIR, register_configs, to_config

register_configs()


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from rlexp.checks.preflight import preflight, print_summary

    with cli.user_errors():
        conf = to_config(cfg)
        out_dir = conf.output_dir or HydraConfig.get().runtime.output_dir
        result = preflight(conf, out_dir)
    print_summary(result)
    print(f"rlexp: wrote {out_dir.rstrip('/')}/validation.json")
    if not result["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    cli.run(main)
