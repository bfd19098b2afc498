"""`sweep.json`: one record per job of a multirun (number, overrides, dir, state, launcher handle, wandb id, objective).

Each job's own run dir is the source of truth (summary.json status, launcher.json, wandb_run.json);
the manifest is an index over them that the submitting process rewrites. That keeps remote jobs
(GKE pods writing to gs://) from racing on one shared file, and lets `refresh` rebuild state after a kill.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from rlexp import storage

MANIFEST = "sweep.json"
STATES = ("pending", "running", "completed", "failed")
# Overrides that steer the sweep itself; they may differ between the first invocation and a resume.
BOOKKEEPING_PREFIXES = ("sweep.", "+sweep.", "++sweep.", "hydra.")


def now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dig(data: Any, dotted: str) -> Any:
    """`data["a"]["b"]` for "a.b"; None when any part is missing."""
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def comparable(overrides: list[str]) -> list[str]:
    """The overrides that define what a job trains (bookkeeping keys dropped), for resume checks."""
    return [o for o in overrides if not o.startswith(BOOKKEEPING_PREFIXES)]


def job_dir_of(sweep_dir: str, job: dict[str, Any]) -> str:
    """The job's Hydra output dir (.hydra/, launcher.json)."""
    out = str(job.get("output_dir") or job["num"])
    return out if storage.is_url(out) or out.startswith("/") else storage.join(sweep_dir, out)


def run_dir_of(sweep_dir: str, job: dict[str, Any]) -> str:
    """Where the job's run files are: `run_dir` when a remote launcher sent them elsewhere (gs://)."""
    return str(job.get("run_dir") or job_dir_of(sweep_dir, job))


def relative_dir(sweep_dir: str, job_dir: str) -> str:
    """Store a job dir relative to the sweep dir when it lies inside it, so a copied sweep still reads."""
    base = str(sweep_dir).rstrip("/") + "/"
    return job_dir[len(base) :] if str(job_dir).startswith(base) else str(job_dir)


def new_manifest(sweep_dir: str, *, name: str, group: str, objective: str, direction: str, sweeper: str) -> dict:
    return {
        "version": 1,
        "name": name,
        "group": group,
        "sweep_dir": str(sweep_dir),
        "sweeper": sweeper,
        "objective": {"name": objective, "direction": direction},
        "swept_keys": [],
        "created": now(),
        "updated": now(),
        "invocations": 0,
        "jobs": [],
    }


def load(sweep_dir: str) -> dict | None:
    data = storage.read_json(storage.join(sweep_dir, MANIFEST))
    return data if isinstance(data, dict) and "jobs" in data else None


def save(sweep_dir: str, manifest: dict) -> None:
    manifest["updated"] = now()
    manifest["jobs"].sort(key=lambda j: j["num"])
    storage.write_json(storage.join(sweep_dir, MANIFEST), manifest)


def get_job(manifest: dict, num: int) -> dict | None:
    return next((j for j in manifest["jobs"] if j["num"] == num), None)


def upsert_job(manifest: dict, num: int, **fields: Any) -> dict:
    job = get_job(manifest, num)
    if job is None:
        job = {
            "num": num,
            "overrides": [],
            "output_dir": str(num),
            "state": "pending",
            "launcher": {"launcher": "local", "handle": None},
            "wandb_run_id": None,
            "objective": None,
            "started": None,
            "ended": None,
        }
        manifest["jobs"].append(job)
    job.update({k: v for k, v in fields.items() if v is not None or k in ("objective",)})
    return job


def _read_json(directory: str, name: str, names: set[str] | None) -> Any:
    """`directory/name` as JSON; not read when a listing of the directory (`names`) lacks it."""
    return None if names is not None and name not in names else storage.read_json(storage.join(directory, name))


def read_job_files(job_dir: str, objective: str, names: set[str] | None = None) -> dict[str, Any]:
    """What a job's dirs say about it: state, objective, launcher handle, wandb run id, remote run dir.

    A remote launcher writes launcher.json into the Hydra job dir and may send the run files
    elsewhere (its "output_dir", e.g. gs://); summary.json and wandb_run.json are read there.
    `names`: the job dir's entries, when the caller listed it already.
    """
    found: dict[str, Any] = {}
    names = names if names is not None else storage.list_names(job_dir)
    launcher = _read_json(job_dir, "launcher.json", names)
    if isinstance(launcher, dict):
        found["launcher"] = {"launcher": launcher.get("launcher"), "handle": launcher.get("handle")}
        remote = launcher.get("output_dir")
        if remote and str(remote).rstrip("/") != str(job_dir).rstrip("/"):
            found["run_dir"] = job_dir = str(remote)
            names = storage.list_names(job_dir)
    summary = _read_json(job_dir, "summary.json", names)
    if isinstance(summary, dict):
        status = summary.get("status")
        found["state"] = "completed" if status == "completed" else "failed"
        found["status"] = status
        value = dig(summary, objective)
        if value is None and isinstance(summary.get("objective"), dict):
            value = summary["objective"].get("value")
        found["objective"] = value
    elif isinstance(launcher, dict) and launcher.get("launcher") not in (None, "local"):
        found["state"] = "running"  # submitted; the run has not written its summary yet
    wandb_run = _read_json(job_dir, "wandb_run.json", names)
    if isinstance(wandb_run, dict):
        found["wandb_run_id"] = wandb_run.get("id")
    return found


def refresh(sweep_dir: str, manifest: dict) -> dict:
    """Update every job record from its run dir (after a kill, or for jobs that ran elsewhere)."""
    objective = manifest["objective"]["name"]
    for job in manifest["jobs"]:
        found = read_job_files(job_dir_of(sweep_dir, job), objective)
        if "state" not in found and job["state"] in ("completed",):
            found["state"] = "failed"  # its summary vanished: treat it as not done
        job.update(found)
    return manifest


def counts(manifest: dict) -> dict[str, int]:
    out = dict.fromkeys(STATES, 0)
    for job in manifest["jobs"]:
        out[job["state"]] = out.get(job["state"], 0) + 1
    return out


def completed_nums(manifest: dict) -> set[int]:
    return {j["num"] for j in manifest["jobs"] if j["state"] == "completed"}
