"""The run plan (rlexp.train.plan): made once before JAX, each check of a run runs once, and training trusts it."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from rlexp.errors import RunError
from rlexp.train import runlock
from rlexp.train.plan import DONE, PLAN_FILE, SUBMIT, TRAIN, RunPlan, make_plan, read_plan
from tests.helpers import compose_cfg

# Every check a run makes before its first step, by the modules that define them.
CHECKS = {
    "rlexp.config.values": ("check_values",),
    "rlexp.config.validate": ("check_rules", "check_steps"),
    "rlexp.estimates.memory": ("check_fits", "estimate_memory"),
    "rlexp.estimates.cost": ("estimate_cost",),
    "rlexp.checks": ("check_rules",),
    "rlexp.families.rules": ("check_family",),
    "rlexp.families.load": ("check_model_dir",),
    "rlexp.train.rundir": ("check_run_dir",),
    "rlexp.train.runlock": ("finished_run", "take"),
    "rlexp.train.checkpoints": ("fall_back_to_restorable",),
}


def count_checks(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Wrap every check wherever a module of rlexp holds it (its own module, or one that imported it by name),
    counting its calls under `module.name`."""
    import importlib

    calls: Counter[str] = Counter()
    for module, names in CHECKS.items():
        mod = importlib.import_module(module)
        for name in names:
            original, key = getattr(mod, name), f"{module}.{name}"

            def counted(*args, _original=original, _key=key, **kwargs):  # noqa: ANN002, ANN003, ANN202
                calls[_key] += 1
                return _original(*args, **kwargs)

            for holder in [m for n, m in list(sys.modules.items()) if n.startswith("rlexp") and m is not None]:
                for held in [k for k, v in vars(holder).items() if v is original]:  # under any name
                    monkeypatch.setattr(holder, held, counted)
    return calls


def plan_of(run_dir: Path, *overrides: str) -> RunPlan:
    from rlexp.config.load import to_config

    cfg = compose_cfg(["logger=none", *overrides])
    return make_plan(to_config(cfg), cfg, str(run_dir), lambda: None)


def checkpoint(run_dir: Path, step: int, metadata: str = "{}") -> Path:
    """A checkpoint step with whole (or, with `metadata` not JSON, damaged) files, as the header check reads them."""
    step_dir = run_dir / "checkpoints" / "actor" / str(step)
    (step_dir / "model_params").mkdir(parents=True)
    (step_dir / "model_params" / "_METADATA").write_text(metadata)
    return step_dir


def test_a_new_run_dir_is_planned_from_scratch_with_its_estimates_and_lock(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    assert plan.action == TRAIN and plan.run_dir == plan.records_dir == str(tmp_path)
    assert plan.resume_step == 0 and plan.set_aside == ()
    assert plan.lock == str(tmp_path / runlock.LOCK) and (tmp_path / runlock.LOCK).is_file()
    assert plan.memory is not None and plan.memory["total"] > 0 and plan.memory["model"] == "tiny"
    assert plan.cost is not None and plan.cost["steps"] == 300
    assert plan.checked_train_rows == 4096  # dataset.train_size: max_steps was checked against it
    runlock.release(str(tmp_path))


def test_the_plan_names_the_checkpoint_it_resumes_from_and_the_damaged_one_it_set_aside(tmp_path: Path) -> None:
    checkpoint(tmp_path, 4)
    checkpoint(tmp_path, 8, metadata="{cut")
    plan = plan_of(tmp_path)
    assert plan.resume_step == 4
    assert plan.set_aside == ((8, "model_params/_METADATA not JSON"),)
    assert (tmp_path / "checkpoints.unrestorable" / "actor" / "8").is_dir()
    assert not (tmp_path / "checkpoints" / "actor" / "8").exists()
    runlock.release(str(tmp_path))


def test_no_whole_checkpoint_refuses_the_plan_in_one_line(tmp_path: Path) -> None:
    checkpoint(tmp_path, 4, metadata="[")
    with pytest.raises(RunError, match="cannot be restored .*start over in another hydra.run.dir"):
        plan_of(tmp_path)
    runlock.release(str(tmp_path))


def test_plan_json_is_readable_and_replays_the_same_plan(tmp_path: Path) -> None:
    checkpoint(tmp_path, 2)
    checkpoint(tmp_path, 6, metadata="{")
    plan = plan_of(tmp_path)
    plan.write()
    text = (tmp_path / PLAN_FILE).read_text()
    data = json.loads(text)
    assert text.startswith('{\n  "action": "train"')  # indented for a person
    assert data["resume_step"] == 2 and data["set_aside"] == [{"step": 6, "why": "model_params/_METADATA not JSON"}]
    assert data["records"] == str(tmp_path / ".hydra")
    assert data["memory"] == plan.memory and data["cost"] == plan.cost
    assert read_plan(str(tmp_path)) == plan
    runlock.release(str(tmp_path))


def test_a_submitted_job_is_planned_without_the_checks_its_launcher_makes(tmp_path: Path) -> None:
    plan = make_plan(*_conf_cfg(), str(tmp_path), lambda: "gke")
    assert plan.action == SUBMIT and plan.launcher == "gke" and plan.lock is None and plan.memory is None
    assert not (tmp_path / runlock.LOCK).exists()


def _conf_cfg() -> tuple:
    from rlexp.config.load import to_config

    cfg = compose_cfg(["logger=none"])
    return to_config(cfg), cfg


def test_a_bad_value_is_named_before_the_launcher_is_asked(tmp_path: Path) -> None:
    from rlexp.config.load import to_config
    from rlexp.errors import ConfigError

    asked = []
    cfg = compose_cfg(["logger=none", "seed=-1"])
    with pytest.raises(ConfigError, match="seed"):
        make_plan(to_config(cfg), cfg, str(tmp_path), lambda: asked.append(1))
    assert not asked


def test_a_completed_run_is_planned_as_done_with_its_objective(tmp_path: Path) -> None:
    summary = {"status": "completed", "train": {"steps": 300}, "eval": {"after": {"pass_at_1": 0.5}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    plan = plan_of(tmp_path)
    assert (plan.action, plan.completed_steps, plan.objective) == (DONE, 300, 0.5)
    assert not (tmp_path / runlock.LOCK).exists()


# A run short enough for a test (the tiny default, 2 steps, one eval in the middle).
TINY = [
    "trainer.max_steps=2",
    "trainer.eval_every=1",
    "trainer.checkpoint_every=2",
    "trainer.eval_prompts=8",
    "trainer.eval_samples=2",
    "logger=none",
]


def run_in_process(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """`python -m rlexp <args>` in this process (its exit status)."""
    from rlexp.__main__ import entry

    monkeypatch.setattr(sys, "argv", ["rlexp", *args])
    try:
        entry()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


@pytest.mark.slow
def test_one_run_makes_each_check_once_and_records_its_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlexp.checks  # noqa: F401 - its names are counted where they are held
    import rlexp.estimates.cost
    import rlexp.families.load
    import rlexp.families.rules
    import rlexp.train.checkpoints
    import rlexp.train.rundir  # noqa: F401

    run = tmp_path / "run"
    calls = count_checks(monkeypatch)
    assert run_in_process(monkeypatch, *TINY, f"hydra.run.dir={run}") == 0
    every = [f"{m}.{n}" for m, names in CHECKS.items() for n in names]
    assert {k: calls[k] for k in every} == dict.fromkeys(every, 1)
    plan = json.loads((run / PLAN_FILE).read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert summary["plan"] == plan and plan["action"] == TRAIN and plan["resume_step"] == 0
    assert summary["cost"]["estimate"] == plan["cost"]  # the estimate the run was planned with

    calls.clear()  # the same command again: the plan finds the run completed, and nothing else runs
    assert run_in_process(monkeypatch, *TINY, f"hydra.run.dir={run}") == 0
    assert calls["rlexp.train.rundir.check_run_dir"] == 1 and calls["rlexp.train.runlock.finished_run"] == 1
    assert (
        calls["rlexp.train.checkpoints.fall_back_to_restorable"] == 0
        and calls["rlexp.estimates.cost.estimate_cost"] == 0
    )


def test_rlexp_validate_reports_the_estimates_a_run_is_planned_with(tmp_path: Path) -> None:
    from rlexp.data.registry import load_splits
    from tests.helpers import compose_conf, run_rlexp

    rows = load_splits(compose_conf([]).dataset).train[:2]
    completions = tmp_path / "completions.jsonl"
    completions.write_text("".join(json.dumps({"id": r["id"], "completion": str(r["answer"])}) + "\n" for r in rows))
    over = ["logger=none", "validate.rows=2", f"validate.completions={completions}"]
    done = run_rlexp(*over, f"hydra.run.dir={tmp_path / 'v'}", module="rlexp.validate", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    validation = json.loads((tmp_path / "v" / "validation.json").read_text())
    plan = json.loads(json.dumps(plan_of(tmp_path / "run", *over).to_dict()))
    assert validation["memory"] == plan["memory"] and validation["cost"] == plan["cost"]
    runlock.release(str(tmp_path / "run"))


# --- a submitted job replays its submitter's plan (rlexp.train.plan: plan_submission, carried_plan) ---------------

# The checks a submitter makes (the config's), and those a job makes where and when it starts (its machine, its run
# dir): a submitted job runs only the second kind, and every start runs them again.
SUBMIT_SIDE = [
    "rlexp.config.values.check_values",
    "rlexp.config.validate.check_rules",
    "rlexp.config.validate.check_steps",
    "rlexp.estimates.memory.check_fits",
    "rlexp.estimates.memory.estimate_memory",
    "rlexp.estimates.cost.estimate_cost",
    "rlexp.checks.check_rules",
    "rlexp.families.rules.check_family",
]
JOB_START = [
    "rlexp.families.load.check_model_dir",
    "rlexp.train.rundir.check_run_dir",
    "rlexp.train.runlock.finished_run",
    "rlexp.train.checkpoints.fall_back_to_restorable",
]


def test_the_checks_are_split_between_the_submitter_and_the_job() -> None:
    every = {f"{m}.{n}" for m, names in CHECKS.items() for n in names}
    assert every == {*SUBMIT_SIDE, *JOB_START, "rlexp.train.runlock.take"}  # the lock: none in a pod or Slurm job


def test_the_config_hash_leaves_out_the_output_dir_and_compares_numbers_by_value() -> None:
    from rlexp.train.plan import config_hash

    base = {"trainer": {"learning_rate": 1.0, "stop": [2, 3.5]}, "output_dir": None}
    assert config_hash(base) == config_hash(
        {"output_dir": "gs://b/r", "trainer": {"stop": [2.0, 3.5], "learning_rate": 1}}
    )
    assert config_hash(base) != config_hash({**base, "trainer": {"learning_rate": 1.5, "stop": [2, 3.5]}})


def submitted_job(
    monkeypatch: pytest.MonkeyPatch, run_dir: Path, *overrides: str, change: dict | None = None
) -> RunPlan:
    """This process as a pod whose command carries the plan a launcher made for `overrides` (and `run_dir`),
    with `change` made to that plan."""
    from omegaconf import OmegaConf

    from rlexp.checks import check_config
    from rlexp.config.load import to_config
    from rlexp.train.plan import PLAN_ENV, plan_submission

    cfg = compose_cfg(["logger=none", *overrides])
    conf = to_config(cfg)
    plan = plan_submission(conf, OmegaConf.to_container(cfg, resolve=True), str(run_dir), check_config(conf))
    monkeypatch.setenv("RLEXP_IN_CLUSTER", "gke")
    monkeypatch.setenv(PLAN_ENV, json.dumps({**plan.submitted(), **(change or {})}))
    return plan


def test_a_submitted_job_trusts_its_plan_and_takes_the_resume_step_where_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    carried = submitted_job(monkeypatch, tmp_path, change={"cost": {"steps": 300, "carried": True}})
    import rlexp.checks

    def refused(*args: object) -> None:
        raise AssertionError("a submitted job checks its config again")

    monkeypatch.setattr(rlexp.checks, "check_rules", refused)
    monkeypatch.setattr("rlexp.config.values.check_values", refused)
    checkpoint(tmp_path, 4)  # written after the submission: a restarted pod resumes from it
    plan = plan_of(tmp_path)
    assert plan.action == TRAIN and plan.cost == {"steps": 300, "carried": True}  # the submitter's estimate
    assert plan.memory == carried.memory and plan.config_hash == carried.config_hash
    assert plan.resume_step == 4 and plan.lock is None and plan.records_dir == str(tmp_path)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"config_hash": "0" * 64}, "RLEXP_PLAN: the plan was made for another config (hash 000000000000, this job's "),
        ({"run_dir": "gs://elsewhere/run"}, "RLEXP_PLAN: the plan was made for run dir gs://elsewhere/run, this job "),
    ],
)
def test_a_plan_made_for_another_job_is_refused_in_one_line(
    change: dict, error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    submitted_job(monkeypatch, tmp_path, change=change)
    with pytest.raises(RunError) as err:
        plan_of(tmp_path)
    assert str(err.value).startswith(error) and "\n" not in str(err.value)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / PLAN_FILE).exists()


def test_another_config_than_the_plan_s_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    submitted_job(monkeypatch, tmp_path, "trainer.learning_rate=0.002")
    with pytest.raises(RunError, match="the plan was made for another config"):
        plan_of(tmp_path)  # the default learning rate


def test_a_plan_path_with_no_plan_is_refused_and_no_plan_means_the_job_plans_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLEXP_IN_CLUSTER", "gke")
    monkeypatch.setenv("RLEXP_PLAN", str(tmp_path / "gone" / PLAN_FILE))
    with pytest.raises(RunError, match=r"RLEXP_PLAN=.*/gone/plan.json: no plan there; .* a file system this node"):
        plan_of(tmp_path)
    monkeypatch.delenv("RLEXP_PLAN")  # a JobSet applied by hand, srun by hand: the job makes its own plan
    assert plan_of(tmp_path).cost is not None


def test_a_slurm_job_s_plan_is_written_to_its_run_dir_and_named_by_its_overrides(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir

    from rlexp.config.load import CONF_DIR
    from rlexp.launch.slurm_jobs import SlurmJob
    from rlexp.launch.slurm_submit import with_plan

    run_dir = tmp_path / "sweep, one=1" / "0"  # a comma and an equals sign in a path stay one value
    plan = RunPlan(TRAIN, str(run_dir), "", memory={"total": 1}, cost={"steps": 2}, config_hash="ab")
    job = SlurmJob(0, ["seed=1"], run_dir, "rlexp", extra={"plan": plan})
    overrides = with_plan(job)
    assert overrides[0] == "seed=1"
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):  # as the job composes them
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    assert cfg.seed == 1 and cfg.hydra.job.env_set.RLEXP_PLAN == str(run_dir / PLAN_FILE)
    assert json.loads((run_dir / PLAN_FILE).read_text()) == plan.submitted()


POD = ["slice=v6e-1", *TINY]  # a TPU slice of one chip: the pod's command trains on this machine's CPU unchanged


def pod_command(jobset: dict, out: Path) -> tuple[list[str], dict[str, str]]:
    """The args and env of the JobSet's `rlexp` container, changed as tests/e2e/test_pod_replay.py changes them:
    output_dir (and the plan's run dir, the same) -> a local dir, JAX_PLATFORMS proxy -> cpu, RLEXP_PATHWAYS
    dropped (pathwaysutils exists on a Pathways head only), field references and optional secrets left out."""
    (head,) = [j for j in jobset["spec"]["replicatedJobs"] if j["name"] == "pathways-head"]
    (c,) = [c for c in head["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "rlexp"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env.pop("JAX_PLATFORMS") == "proxy" and env.pop("RLEXP_PATHWAYS") == "1"
    plan = json.loads(env["RLEXP_PLAN"])
    assert plan["run_dir"] == env["RLEXP_OUTPUT_DIR"] and f"output_dir={plan['run_dir']}" in c["args"]
    args = [f"output_dir={out}" if a == f"output_dir={plan['run_dir']}" else a for a in c["args"]]
    env.update(JAX_PLATFORMS="cpu", RLEXP_OUTPUT_DIR=str(out), RLEXP_PLAN=json.dumps({**plan, "run_dir": str(out)}))
    return args, env


@pytest.mark.slow
def test_a_pod_replays_its_submitter_s_plan_and_runs_none_of_its_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    import rlexp.checks  # noqa: F401 - its names are counted where they are held
    import rlexp.estimates.cost
    import rlexp.families.load
    import rlexp.families.rules
    import rlexp.train.checkpoints
    import rlexp.train.rundir  # noqa: F401

    for name in ("KUBECONFIG", "RLEXP_OUTPUT_ROOT", "RLEXP_PLAN", "RLEXP_IN_CLUSTER"):
        monkeypatch.delenv(name, raising=False)
    calls = count_checks(monkeypatch)
    dry = tmp_path / "dry"
    assert run_in_process(monkeypatch, *POD, "hydra.launcher.dry_run=true", f"hydra.run.dir={dry}") == 0
    assert {k: calls[k] for k in SUBMIT_SIDE} == dict.fromkeys(SUBMIT_SIDE, 1)  # the user's dry run checked once
    assert not any(calls[k] for k in JOB_START)

    out = tmp_path / "run"
    args, env = pod_command(yaml.safe_load((dry / "jobset.yaml").read_text()), out)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # the pod's own disk: Hydra's run dir, the .hydra records
    calls.clear()
    assert run_in_process(monkeypatch, *args) == 0
    assert not any(calls[k] for k in SUBMIT_SIDE), {k: calls[k] for k in SUBMIT_SIDE}
    assert {k: calls[k] for k in JOB_START} == dict.fromkeys(JOB_START, 1) and not calls["rlexp.train.runlock.take"]
    carried, plan = json.loads(env["RLEXP_PLAN"]), json.loads((out / PLAN_FILE).read_text())
    assert {k: plan[k] for k in carried} == carried and plan["resume_step"] == 0  # the submitter's decisions
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["plan"] == plan and summary["cost"]["estimate"] == plan["cost"]

    # The JobSet restarts the pod (a kill after the last checkpoint, before the summary): the same command resumes
    # from the checkpoint no submitter saw, and still checks nothing of the config's again.
    (out / "summary.json").unlink()
    calls.clear()
    assert run_in_process(monkeypatch, *args) == 0
    assert not any(calls[k] for k in SUBMIT_SIDE) and {k: calls[k] for k in JOB_START} == dict.fromkeys(JOB_START, 1)
    plan = json.loads((out / PLAN_FILE).read_text())
    assert plan["resume_step"] == 2 and {k: plan[k] for k in carried} == carried
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["train"]["steps"] == 2
