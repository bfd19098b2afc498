"""The parts of an export (`python -m rlexp.export`) that hold for every family: the run's checkpoint and config,
the folder to write, a model's nnx parameters, the base checkpoint's tensors, restoring the actor, writing shards.

`rlexp.families.export` puts them together with the family's names for the Hugging Face tensors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.config.schema import RlexpConfig
from rlexp.errors import RlexpError, RunError

SHARD = 5 * 2**30  # bytes per safetensors file, as the hub writes them


def find_checkpoint(target: Path) -> tuple[Path, Path, int]:
    """(run dir, actor checkpoint root, step) for a run dir or one `checkpoints/actor/<step>` folder."""
    if target.name.isdigit() and target.parent.name == "actor":
        root, step = target.parent, int(target.name)
        if not target.is_dir():
            saved = saved_steps(root)
            have = f"saved steps: {', '.join(map(str, saved))}" if saved else "the run saved no checkpoint"
            raise RlexpError(f"checkpoint={target}: no such step; {have}")
        return root.parent.parent, root, step
    if not target.is_dir():
        raise RlexpError(f"checkpoint={target}: no such run dir; give a run dir or <run dir>/checkpoints/actor/<step>")
    root = target / "checkpoints" / "actor"
    steps = saved_steps(root)
    if not steps:
        raise RlexpError(f"checkpoint={target}: no checkpoints/actor/<step> folder; pass a run dir that saved one")
    return target, root, steps[-1]


def saved_steps(root: Path) -> list[int]:
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit() and p.is_dir()) if root.is_dir() else []


def recorded_config(run_dir: Path) -> Any:
    """The run's recorded config (`.hydra/config.yaml`, its `hydra` node dropped) as a DictConfig; one line naming
    the file when it is missing, not YAML, or not an rlexp config (a damaged copy)."""
    from omegaconf import OmegaConf

    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise RlexpError(f"{run_dir}: no .hydra/config.yaml; pass the run dir that `python -m rlexp` wrote")
    try:
        raw = OmegaConf.load(path)
        raw.pop("hydra", None)
        OmegaConf.merge(OmegaConf.structured(RlexpConfig), raw)  # its shape: the schema's keys and types
    except Exception as err:  # noqa: BLE001 - YAML or OmegaConf: the recorded config is unusable
        raise _unusable(path, err) from None
    return raw


def _unusable(path: Path, err: BaseException) -> RunError:
    return RunError(
        f"{path}: not the config of an rlexp run ({str(err).splitlines()[0][:200]}); restore it from a copy"
    )


def run_config(run_dir: Path) -> RlexpConfig:
    from omegaconf import OmegaConf

    from rlexp.config.load import to_config

    raw = recorded_config(run_dir)
    try:
        return to_config(OmegaConf.merge(OmegaConf.structured(RlexpConfig), raw))
    except RlexpError:
        raise
    except Exception as err:  # noqa: BLE001 - a value the schema refuses: the recorded config is unusable
        raise _unusable(run_dir / ".hydra" / "config.yaml", err) from None


def check_out(out: str) -> Path:
    """The folder to write into: new, empty, or an earlier rlexp output (its marker); never a file or another's folder."""
    from rlexp.storage import check_output_dir

    return check_output_dir(out)


def flat_params(model: Any) -> dict[str, np.ndarray]:
    """{"layers.0.attn.q_proj.w": array, ...}: a model's nnx parameters by dotted path."""
    import jax
    from flax import nnx

    leaves = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(model, nnx.Param)))[0]
    return {".".join(str(getattr(p, "key", getattr(p, "idx", p))) for p in path): np.asarray(v) for path, v in leaves}


def source_tensors(folder: Path) -> dict[str, Any]:
    """Names (and lazy readers) of the base checkpoint's tensors."""
    from rlexp.models.checkpoint import safetensors_files
    from rlexp.models.gpt_oss.params import read_safetensors

    out = {}
    for path in safetensors_files(str(folder)):
        for name, value in read_safetensors(path):
            out[name] = value
    return out


def write_shards(tensors: dict[str, np.ndarray], dest: Path, metadata: dict[str, str], max_bytes: int = SHARD) -> None:
    """model.safetensors, or model-0000i-of-0000n.safetensors + index.json above `max_bytes` (the hub's layout)."""
    from safetensors.numpy import save_file

    for old in dest.glob("model*.safetensors*"):
        old.unlink()
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].nbytes
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name]
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(dest / "model.safetensors"), metadata=metadata)
        return
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(dest / fname), metadata=metadata)
        weight_map.update(dict.fromkeys(shard, fname))
    index = {"metadata": {"total_size": sum(v.nbytes for v in tensors.values())}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def restore_actor(
    model: Any, root: Path, step: int, *, lora_only: bool, other_step: str = "export another step ({steps})"
) -> None:
    """Restore the actor checkpoint `root/step` into `model`; one RunError line when it cannot be. `other_step`: the
    command's fix when other steps were saved (`{steps}` lists them): export and eval each name their own."""
    from tunix.sft.checkpoint_manager import CheckpointManager

    from rlexp.compat.orbax import drop_failed_read_leftovers

    drop_failed_read_leftovers()  # a damaged file's read leftovers would bury the one-line error
    try:
        restored, _ = CheckpointManager(str(root.resolve())).maybe_restore(
            model, step=step, restore_only_lora_params=lora_only
        )
    except Exception as err:  # noqa: BLE001 - orbax raises many types for a damaged checkpoint
        others = [s for s in saved_steps(root) if s != step]
        steps = ", ".join(map(str, others))
        fix = other_step.format(steps=steps) if others else "retrain, or restore it from a copy"
        reason = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
        raise RunError(f"checkpoint={root}/{step}: cannot be restored ({reason}); {fix}") from err
    if restored != step:
        raise RunError(f"checkpoint={root}/{step}: could not restore the actor checkpoint; retrain or restore it")
