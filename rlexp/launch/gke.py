"""GKE launcher core: check every job, render one JobSet each, then dry-run (write) or submit (and wait).

Both the Hydra launcher plugin (`-m` sweeps) and the single-run form (`python -m rlexp slice=v6e-32`) end in
`run_jobs`, so one run and a sweep of a thousand go through the same checks, names and manifests. Nothing is
submitted until every job has passed its checks and rendered a valid manifest.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from rlexp.config.hardware import tpu_slice
from rlexp.config.launcher import PLACEHOLDER_IMAGE, GkeLauncherConf, check_settings
from rlexp.errors import ConfigError, RlexpError, user_errors_from_resolvers
from rlexp.launch import prelaunch
from rlexp.launch.jobset_checks import check_jobset
from rlexp.launch.manifest import PLACEHOLDER_ROOT, SPEC_HASH, JobSpec, render
from rlexp.launch.names import check_name, jobset_name, unique_names
from rlexp.launch.yaml_text import dump as dump_yaml

log = logging.getLogger(__name__)


class Job:
    """One job: number, overrides, output dir, and its config as a DictConfig (`cfg`, no `hydra` node), plain
    dicts (`raw` keeps interpolations, `resolved` resolves them) and Hydra node (`hydra_cfg`).

    A sweep's jobs come from rlexp.launch.compose, which builds each form on first use: a dry run of a
    thousand jobs reads only the dicts, never a per-job DictConfig."""

    def __init__(
        self,
        idx: int,
        overrides: list[str],
        out_dir: Path,
        *,
        cfg: DictConfig | None = None,
        hydra_cfg: DictConfig | None = None,
        composed: Any = None,
    ) -> None:
        self.idx, self.overrides, self.out_dir = idx, overrides, out_dir
        self._cfg, self._hydra_cfg, self._composed = cfg, hydra_cfg, composed
        self._resolved: dict | None = None

    @property
    def cfg(self) -> DictConfig:
        return self._cfg if self._cfg is not None else self._composed.task

    @property
    def hydra_cfg(self) -> DictConfig:
        return self._hydra_cfg if self._hydra_cfg is not None else self._composed.hydra

    @property
    def raw(self) -> dict:
        if self._composed is not None:
            return self._composed.raw  # type: ignore[no-any-return]
        return OmegaConf.to_container(self.cfg, resolve=False)  # type: ignore[return-value]

    @property
    def resolved(self) -> dict:
        if self._resolved is None:
            with user_errors_from_resolvers():
                self._resolved = self._composed.resolved if self._composed is not None else _resolve(self.cfg)
        return self._resolved

    @property
    def task_name(self) -> str:
        if self._composed is not None:
            return str(self._composed.name)
        return str(self.hydra_cfg.hydra.job.name) if "hydra" in self.hydra_cfg else "rlexp"


@dataclass
class Rendered:
    job: Job
    name: str
    output_dir: str
    manifest: dict
    typed: Any  # the RlexpConfig the pod will compose
    resolved: dict  # the same, as saved for audit


def settings(params: Any) -> GkeLauncherConf:
    """The launcher's `hydra.launcher` node (or kwargs) as a typed GkeLauncherConf."""
    if isinstance(params, DictConfig):
        params = OmegaConf.to_container(params, resolve=True)
    names = {f.name for f in fields(GkeLauncherConf)}
    unknown = set(params) - names
    if unknown:
        raise ConfigError(
            "hydra.launcher", sorted(unknown), f"unknown launcher keys; use {sorted(names - {'_target_'})}"
        )
    conf = GkeLauncherConf(**{k: v for k, v in params.items() if k in names})
    check_settings(conf)  # max_restarts=-1 would reach the JobSet
    return conf


def _resolve(cfg: DictConfig) -> dict:
    with user_errors_from_resolvers():
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def prepare(jobs: Sequence[Job], conf: GkeLauncherConf, *, single: bool = False) -> list[Rendered]:
    """Checks, names and manifests for every job; raises on the first problem, before any submission.

    `single`: a run without -m (its plan checked its values: rlexp.train.plan.make_plan), whose valid run_name
    becomes the JobSet name as is (rlexp.launch.names). Each job's plan goes into its JobSet (`RLEXP_PLAN`)."""
    from rlexp.config.load import to_config
    from rlexp.envs import resolve
    from rlexp.launch.env_sidecar import container, pod_view
    from rlexp.train.plan import plan_submission

    if not conf.dry_run and not conf.output_root:
        raise ConfigError(
            "hydra.launcher.output_root",
            None,
            "set a gs:// root for run dirs (or env RLEXP_OUTPUT_ROOT), or add hydra.launcher.dry_run=true",
        )
    if conf.output_root and "://" not in conf.output_root:
        raise ConfigError(
            "hydra.launcher.output_root", conf.output_root, "use a bucket URL the pods can write, gs://..."
        )
    if not conf.dry_run and conf.image == PLACEHOLDER_IMAGE:
        raise ConfigError(
            "hydra.launcher.image",
            conf.image,
            "the placeholder no node can pull: push the image (Dockerfile) and set hydra.launcher.image="
            "<registry>/rlexp@sha256:... (or env RLEXP_IMAGE)",
        )
    root = (conf.output_root or PLACEHOLDER_ROOT).rstrip("/")
    shared = prelaunch.SharedChecks(allow_downloads=False)
    out: list[Rendered] = []
    for job in jobs:
        try:
            resolved, served, side = pod_view(job.resolved)  # env.image: the pod's sidecar serves it
            typed = resolve(to_config(resolved))  # env=...: the config the pod trains
            memory = prelaunch.check_job(typed, conf.pathways, values=not single)
            tpu = tpu_slice(typed.slice.name, typed.slice.topology)
            name = jobset_name(typed.run_name, job.overrides, conf.name_prefix, single=single and len(jobs) == 1)
            check_name(name)
            output_dir = typed.output_dir or f"{root}/{name}"
            if "://" not in output_dir:
                raise ConfigError(
                    "output_dir", output_dir, "a pod's local disk is lost with it: use gs://... or unset it"
                )
            plan = plan_submission(typed, resolved, output_dir, memory)  # the pod replays it (RLEXP_PLAN)
            if conf.preflight:
                elsewhere = f"{side.key}.image {side.image} is served by the pod's sidecar" if side else None
                shared.run_once(typed, job.raw, job.out_dir, plan, env_elsewhere=elsewhere)
            args = [*job.overrides, *served]
            if not any(a.split("=", 1)[0].lstrip("+~") == "output_dir" for a in args):
                args.append(f"output_dir={output_dir}")
            if not any(a.startswith("hydra.mode=") for a in args):
                args.append("hydra.mode=RUN")  # a sweep preset's MULTIRUN must not make the pod launch again
            spec = JobSpec(
                name=name,
                slice=tpu,
                num_slices=typed.slice.num_slices,
                args=args,
                output_dir=output_dir,
                run_name=typed.run_name,
                labels={"rlexp.dev/slice": typed.slice.name},
                env={str(k): str(v) for k, v in typed.trainer.rollout.env.items()},
                plan=json.dumps(plan.submitted(), sort_keys=True),
                sidecars=[container(side)] if side else [],
            )
            manifest = render(spec, conf)
            check_jobset(manifest, tpu, typed.slice.num_slices)
        except ConfigError as err:
            if len(jobs) == 1:
                raise
            raise ConfigError(err.key, err.value, f"{err.fix} [job {job.idx}: {' '.join(job.overrides)}]") from None
        out.append(Rendered(job, name, output_dir, manifest, typed, resolved))
    unique_names([r.name for r in out], [r.job.overrides for r in out])
    unique_names([r.output_dir for r in out], [r.job.overrides for r in out], what="output_dir")
    shared.report()
    return out


class _SectionDumps:
    """YAML of a config's top-level sections, remembered per section object: the jobs of a sweep share the
    sections they do not change (rlexp.launch.compose), so each distinct section is dumped once. A block
    mapping's YAML is the concatenation of its items' YAML, so the text equals one dump of the whole."""

    def __init__(self) -> None:
        self.texts: dict[tuple[str, int], tuple[Any, str]] = {}  # the object is kept so its id stays unique

    def dump(self, data: dict) -> str:
        if not data:
            return dump_yaml(data)
        parts = []
        for key, value in data.items():
            found = self.texts.get((key, id(value)))
            if found is None or found[0] is not value:
                found = self.texts[(key, id(value))] = (value, dump_yaml({key: value}))
            parts.append(found[1])
        return "".join(parts)


def _write_job_files(
    r: Rendered, conf: GkeLauncherConf, state: str, context: str | None, dumps: _SectionDumps | None = None
) -> Path:
    dumps = dumps or _SectionDumps()
    d = r.job.out_dir
    d.mkdir(parents=True, exist_ok=True)  # then .hydra: two calls where mkdir(parents=True) of .hydra makes three
    (d / ".hydra").mkdir(exist_ok=True)
    path = d / "jobset.yaml"
    path.write_text(dump_yaml(r.manifest))
    # what the pod will compose, resolved: the audit copy of the run's config
    (d / "config.resolved.yaml").write_text(dumps.dump(r.resolved))
    hydra_files = d / ".hydra" / "overrides.yaml"
    if not hydra_files.exists():
        hydra_files.write_text(dump_yaml(list(r.job.overrides)))
        (d / ".hydra" / "config.yaml").write_text(dumps.dump(r.job.raw))
    record = {
        "launcher": "gke",
        "handle": r.name,
        "namespace": conf.namespace,
        "context": context,
        "state": state,
        # a dry run only plans where run files would go; readers of output_dir expect a real run there
        ("planned_output_dir" if state == "dry-run" else "output_dir"): r.output_dir,
        "manifest": path.name,
        "overrides": list(r.job.overrides),
        "submitted_at": time.time(),
    }
    (d / "launcher.json").write_text(json.dumps(record, indent=1))
    return path


def run_jobs(jobs: Sequence[Job], conf: GkeLauncherConf, *, single: bool = False) -> list[Any]:
    """Prepare every job, then write (dry run) or submit them; returns one Hydra JobReturn per job."""
    t0 = time.perf_counter()
    rendered = prepare(jobs, conf, single=single)
    dumps = _SectionDumps()
    if conf.dry_run:
        for r in rendered:
            path = _write_job_files(r, conf, "dry-run", conf.context, dumps)
            print(f"rlexp: dry run: {r.name} -> {path}")
        dt = time.perf_counter() - t0
        print(f"rlexp: rendered {len(rendered)} JobSet(s) in {dt:.2f}s; submit by dropping hydra.launcher.dry_run=true")
        return [_job_return(r, "COMPLETED", str(r.job.out_dir / "jobset.yaml")) for r in rendered]
    from rlexp.launch.k8s import connect

    cluster = connect(conf.context)
    refuse_taken_names(cluster, rendered, conf)
    states, earlier = {}, {}
    for r in rendered:
        value = _completed_earlier(r)
        if value is not None:  # sweep.resume=true: a job that completed before is neither resubmitted nor rerun
            earlier[r.name] = value
            print(f"rlexp: {r.name} completed earlier (objective {value}); not submitted again")
            continue
        created = cluster.create_jobset(r.manifest)
        states[r.name] = "submitted" if created else "exists"
        _write_job_files(r, conf, states[r.name], cluster.context, dumps)
        verb = "submitted" if created else "already exists (submitted before; not duplicated)"
        print(f"rlexp: {r.name} {verb} [{cluster.context}/{conf.namespace}] -> {r.output_dir}")
    pending = [r for r in rendered if r.name not in earlier]
    if not conf.wait:
        results = {
            r.name: _job_return(r, "COMPLETED", {"jobset": r.name, "state": states[r.name], "output_dir": r.output_dir})
            for r in pending
        }
    else:
        results = dict(zip([r.name for r in pending], wait_all(cluster, pending, conf), strict=True))
    results.update({r.name: _job_return(r, "COMPLETED", earlier[r.name]) for r in rendered if r.name in earlier})
    return [results[r.name] for r in rendered]


def refuse_taken_names(cluster: Any, rendered: Sequence[Rendered], conf: GkeLauncherConf) -> None:
    """Before anything is submitted: a JobSet that already has a job's name must run the same manifest.

    The same command again finds its JobSets and does not duplicate them; another config under a taken name
    (e.g. a verbatim run_name reused with a new learning rate) would be silently dropped, so it is refused."""
    existing = cluster.list_jobsets(conf.namespace, "app.kubernetes.io/managed-by=rlexp")
    for r in rendered:
        other = existing.get(r.name)
        if other is None:
            continue
        theirs = ((other.get("metadata") or {}).get("annotations") or {}).get(SPEC_HASH)
        if theirs != r.manifest["metadata"]["annotations"][SPEC_HASH]:
            raise ConfigError(
                "run_name",
                r.typed.run_name,
                f"JobSet {r.name} already exists in {cluster.context}/{conf.namespace} with another config; "
                f"choose another run_name, or cancel it first: python -m rlexp.jobs cancel {r.name}",
            )


def _completed_earlier(r: Rendered) -> float | None:
    """With sweep.resume=true, the objective a job recorded when it completed in an earlier submission."""
    if not (r.resolved.get("sweep") or {}).get("resume", False):
        return None
    from rlexp.sweep.resume import completed_objective

    try:
        return completed_objective(r.output_dir, str(r.resolved.get("objective")))
    except Exception:  # noqa: BLE001 - unreadable remote run dir (e.g. no gcsfs here): the JobSet check still dedups
        return None


def wait_all(cluster: Any, rendered: Sequence[Rendered], conf: GkeLauncherConf) -> list[Any]:
    """Poll every JobSet until Completed/Failed, then map states to JobReturns.

    Two clocks, because Kueue may hold a job for hours before it runs: `admission_timeout_s` bounds the time
    a JobSet stays Pending/Suspended, `wait_timeout_s` the whole wait (0 = no limit)."""
    from rlexp.launch.k8s import jobset_state

    final: dict[str, str] = {}
    start = time.monotonic()
    deadline = start + conf.wait_timeout_s if conf.wait_timeout_s > 0 else None
    while True:
        waited = time.monotonic() - start
        for r in rendered:
            if r.name not in final:
                state = jobset_state(cluster.get_jobset(r.name, conf.namespace))
                if state in ("Pending", "Suspended") and 0 < conf.admission_timeout_s < waited:
                    state = "NotAdmitted"
                if state in ("Completed", "Failed", "NotFound", "NotAdmitted"):
                    final[r.name] = state
                    print(f"rlexp: {r.name} {state}")
        if len(final) == len(rendered) or (deadline is not None and time.monotonic() > deadline):
            break
        time.sleep(conf.poll_s)
    out = []
    for r in rendered:
        state = final.get(r.name, "Timeout")
        if state == "Completed":
            out.append(_job_return(r, "COMPLETED", _objective(r)))
            continue
        why = {
            "Timeout": f"did not finish within wait_timeout_s={conf.wait_timeout_s:.0f}",
            "NotAdmitted": f"still pending after admission_timeout_s={conf.admission_timeout_s:.0f} "
            f"(Kueue queue {conf.queue!r}: quota, or no matching TPU node pool?)",
            "NotFound": "disappeared (cancelled?)",
        }.get(state, state.lower())
        msg = f"JobSet {r.name} {why}; python -m rlexp.jobs status|logs {r.name}"
        out.append(_job_return(r, "FAILED", RuntimeError(msg)))
    return out


def _objective(r: Rendered) -> Any:
    """The run's objective from summary.json under its output dir, when readable from here."""
    try:
        import fsspec

        with fsspec.open(f"{r.output_dir}/summary.json") as f:
            summary = json.load(f)
        value: Any = summary
        for part in str(r.resolved.get("objective", "")).split("."):
            value = value[part]
        return value
    except Exception:  # no gcsfs or no summary yet: return the submission record instead
        return {"jobset": r.name, "state": "Completed", "output_dir": r.output_dir}


class _JobReturn(JobReturn):
    """Hydra's JobReturn whose `cfg` and `hydra_cfg` are the job's, built when first read: sweepers read only
    the return value, and a DictConfig per job would cost more than rendering the job."""

    def __init__(self, job: Job, **fields: Any) -> None:
        self.job = job
        super().__init__(**fields)

    cfg = property(lambda self: self.job.cfg, lambda self, value: None)  # type: ignore[assignment]
    hydra_cfg = property(lambda self: self.job.hydra_cfg, lambda self, value: None)  # type: ignore[assignment]


def _job_return(r: Rendered, status: str, value: Any) -> Any:
    from hydra.core.utils import JobStatus

    ret = _JobReturn(
        r.job,
        overrides=list(r.job.overrides),
        working_dir=str(r.job.out_dir),
        task_name=r.job.task_name,
        status=JobStatus[status],
    )
    ret.return_value = value
    return ret


def launch_sweep(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """Hydra `Launcher.launch`: compose every job like BasicLauncher, then `run_jobs`."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import configure_log, setup_globals

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    conf = settings(launcher.params)
    from rlexp.launch.compose import SweepComposer

    HydraConfig.instance().set_config(launcher.config)  # for `${hydra:...}` in task configs
    composer = getattr(launcher, "composer", None)  # rlexp's sweeper hands over what its validation composed
    if composer is None or composer.master is not launcher.config:
        composer = SweepComposer(launcher.hydra_context.config_loader, launcher.config)
    jobs = []
    for i, overrides in enumerate(job_overrides):
        idx = initial_job_idx + i
        with user_errors_from_resolvers():
            c = composer.compose(overrides, idx)
        job = Job(idx, list(overrides), c.out_dir, composed=c)
        _ = job.resolved  # every job resolves (a resolver's error stops the sweep) before any job is checked
        jobs.append(job)
    Path(str(launcher.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    return run_jobs(jobs, conf)


def launch_single(cfg: DictConfig) -> Any:
    """The single-run form (`python -m rlexp slice=v6e-32`, no -m): the same path as a sweep of one."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    conf = settings(hc.launcher)
    job = Job(
        0, list(hc.overrides.task), Path(hc.runtime.output_dir), cfg=cfg, hydra_cfg=OmegaConf.create({"hydra": hc})
    )
    (ret,) = run_jobs([job], conf, single=True)
    if ret.status.name == "FAILED":
        raise RlexpError(str(ret._return_value))
    sys.stdout.flush()
    return ret._return_value
