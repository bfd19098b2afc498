"""`python -m rlexp.validate <overrides>`: the preflight before a launch (rlexp.checks.data_preflight).

Checks the config, loads the dataset, renders `validate.rows` prompts, samples completions (or reads
`validate.completions`) and calls every reward; writes `validation.json` to the run dir. Exit status 1
when a check fails, 2 for a user error in the command itself (a bad value, a missing completions file):
those stop before anything is loaded.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig

from rlexp import cli
from rlexp.config.load import CONF_DIR, register_configs, to_config
from rlexp.errors import RunError

register_configs()
log = logging.getLogger("rlexp.validate")  # by name: run as __main__ by python -m


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from rlexp.checks import check_config
    from rlexp.checks.data_preflight import preflight, print_summary
    from rlexp.checks.reward_preflight import read_completions
    from rlexp.envs import resolve

    conf = resolve(to_config(cfg))  # env=...: the env's scorer and sizes (rlexp.envs)
    # Stop at the first input error, before the dataset or a model is loaded: one line, exit 2 (1 for a
    # completions file that exists but cannot be used).
    memory = check_config(conf)
    if conf.validate.completions:
        read_completions(conf.validate.completions)
    else:
        from rlexp.families.load import check_model_dir

        check_model_dir(conf.model)  # the model samples the completions: its folder must be whole
    out_dir = conf.output_dir or HydraConfig.get().runtime.output_dir
    log.debug("preflight of %d rows, completions %s", conf.validate.rows, conf.validate.completions or "sampled")
    result = preflight(conf, out_dir, checked=memory)  # memory and cost: the estimates a run's plan holds
    print_summary(result)
    written = f"{out_dir.rstrip('/')}/validation.json"
    print(f"rlexp: wrote {written}")  # the report's last line, on stdout with it: stderr holds only an error
    failed = [c for c in result["checks"] if c["status"] == "failed"]
    if failed:  # the report is on stdout; stderr gets the one line every failing command ends with
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        detail = " ".join(str(failed[0]["detail"]).split())[:300]
        raise RunError(f"preflight {failed[0]['name']}: {detail}{more}; fix it and rerun, details in {written}")


if __name__ == "__main__":
    cli.run(main)
