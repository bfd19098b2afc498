"""Hardware slices: the TPU table (GKE labels, machine types, Pathways instance types) and GPU node shapes.

A TPU slice YAML names only the slice and its topology; every derived value (chips, VMs, chips per VM,
accelerator label, machine type, Pathways instance type, devices, rollout split) is computed here and
reaches the config through the `rlexp.tpu` resolver, so nothing is typed twice. Pure Python, no JAX.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlexp.errors import ConfigError

if TYPE_CHECKING:
    from rlexp.config.schema import SliceConfig

# generation -> (GKE accelerator label, machine type for 4-chip VMs, 1-chip VMs, Pathways instance prefix,
#                TPU name counts TensorCores (2 per chip) rather than chips)
_GENERATIONS: dict[str, tuple[str, str, str | None, str, bool]] = {
    "v5p": ("tpu-v5p-slice", "ct5p-hightpu-4t", None, "tpuv5", True),
    "v6e": ("tpu-v6e-slice", "ct6e-standard-4t", "ct6e-standard-1t", "tpuv6e", False),
    "v5litepod": ("tpu-v5-lite-podslice", "ct5lp-hightpu-4t", "ct5lp-hightpu-1t", "tpuv5e", False),
    "v7x": ("tpu7x", "tpu7x-standard-4t", None, "tpu7x", True),  # Ironwood; xpk and gcluster call it tpu7x-N
}
# JAX devices per chip: a v7x chip's two TensorCores are two devices (v5p fuses its two into one, megacore)
DEVICES_PER_CHIP: dict[str, int] = {"v7x": 2}

# The slices rlexp ships (conf/slice/<name>.yaml); topology per xpk's system characteristics.
TPU_TOPOLOGIES: dict[str, str] = {
    "v5p-8": "2x2x1",
    "v5p-16": "2x2x2",
    "v5p-32": "2x2x4",
    "v5p-64": "2x4x4",
    "v5p-128": "4x4x4",
    "v5p-256": "4x4x8",
    "v6e-1": "1x1",
    "v6e-4": "2x2",
    "v6e-8": "2x4",
    "v6e-16": "4x4",
    "v6e-32": "4x8",
    "v6e-64": "8x8",
    "v6e-128": "8x16",
    "v6e-256": "16x16",
    "v5litepod-8": "2x4",
    "v5litepod-16": "4x4",
    "v5litepod-32": "4x8",
    "v5litepod-64": "8x8",
    "v5litepod-128": "8x16",
    "v5litepod-256": "16x16",
    "v7x-8": "2x2x1",
    "v7x-16": "2x2x2",
    "v7x-32": "2x2x4",
    "v7x-64": "2x4x4",
    "v7x-128": "4x4x4",
    "v7x-256": "4x4x8",
}

# Slurm GPU slices: name -> (nodes, GPUs per node, GPU type, HBM GiB per GPU)
GPU_SLICES: dict[str, tuple[int, int, str, float]] = {
    "h200": (1, 1, "h200", 141.0),
    "gpu-8xh200": (1, 8, "h200", 141.0),
    "gpu-2x8xh200": (2, 8, "h200", 141.0),
}

# Dense bf16 FLOP/s per chip, the denominator of `perf/mfu` (rlexp/estimates/flops.py). TPUs: the Cloud TPU system
# architecture pages. H200: the 8192^3 bf16 matmul rate measured on one (788 TFLOP/s; the datasheet's 989 is not
# reached by any kernel). CPU, per core: 2 AVX-512 FMA units x 16 fp32 lanes x 2 FLOP x 3 GHz (XLA's f32 dots
# reach 160-200 GFLOP/s a core on the Zen 5 of benchmarks/README.md).
PEAK_FLOPS_PER_CHIP: dict[str, float] = {
    "v5p": 459e12, "v6e": 918e12, "v5litepod": 197e12, "v7x": 2307e12, "h200": 790e12
}  # fmt: skip
CPU_PEAK_FLOPS_PER_CORE = 192e9

# HBM per chip by TPU generation (public TPU specs); the memory estimate falls back to it by name prefix.
HBM_GIB_PER_CHIP = {"v5p": 95.0, "v6e": 32.0, "v5litepod": 16.0, "v5e": 16.0, "v4": 32.0, "v7x": 192.0, "tpu7x": 192.0}


@dataclass(frozen=True)
class TpuSlice:
    """Everything a launcher needs to know about one TPU slice, derived from its name and topology."""

    name: str
    generation: str
    topology: str
    chips: int
    chips_per_vm: int
    vms: int
    accelerator: str
    machine_type: str
    instance_type: str  # Pathways resource manager --instance_type
    hbm_gib_per_chip: float
    devices_per_chip: int = 1

    @property
    def devices(self) -> int:
        return self.chips * self.devices_per_chip

    @property
    def hbm_gib_per_device(self) -> float:
        return self.hbm_gib_per_chip / self.devices_per_chip

    @property
    def trainer_rollout_split(self) -> tuple[int, int]:
        """Multi-host slices give half the chips to rollout (MaxText's 0.5/0.5); one VM colocates."""
        rollout = self.chips // 2 if self.vms >= 2 else 0
        return self.chips - rollout, rollout


def generation_of(name: str) -> str:
    gen, _, count = name.rpartition("-")
    if gen not in _GENERATIONS or not count.isdigit():
        raise ConfigError(
            "slice.name", name, f"TPU slices are <generation>-<count> with generation in {sorted(_GENERATIONS)}"
        )
    return gen


def tpu_slice(name: str, topology: str | None = None) -> TpuSlice:
    """Derive a TPU slice from its name (and topology, which defaults to the table's)."""
    gen = generation_of(name)
    topology = topology or TPU_TOPOLOGIES.get(name)
    if not topology:
        raise ConfigError("slice.topology", topology, f"give the topology of {name}, e.g. 4x8")
    try:
        dims = [int(d) for d in topology.split("x")]
    except ValueError:
        raise ConfigError("slice.topology", topology, "use dimensions joined by x, e.g. 4x8 or 2x4x4") from None
    chips = math.prod(dims)
    label, machine4, machine1, prefix, counts_cores = _GENERATIONS[gen]
    named = int(name.rpartition("-")[2])
    expected = chips * 2 if counts_cores else chips
    if named != expected:
        raise ConfigError(
            "slice.topology",
            topology,
            f"{name} has {named // (2 if counts_cores else 1)} chips, {topology} has {chips}",
        )
    chips_per_vm = 1 if chips == 1 else 4
    machine = machine1 if chips_per_vm == 1 else machine4
    if machine is None:
        raise ConfigError("slice.topology", topology, f"{gen} has no single-chip VMs")
    return TpuSlice(
        name=name,
        generation=gen,
        topology=topology,
        chips=chips,
        chips_per_vm=chips_per_vm,
        vms=chips // chips_per_vm,
        accelerator=label,
        machine_type=machine,
        instance_type=f"{prefix}:{topology}",
        hbm_gib_per_chip=HBM_GIB_PER_CHIP[gen],
        devices_per_chip=DEVICES_PER_CHIP.get(gen, 1),
    )


def _resolve_tpu(key: str, name: str, topology: str, num_slices: int = 1) -> object:
    """OmegaConf resolver `${rlexp.tpu:<key>,${.name},${.topology},${.num_slices}}`."""
    s = tpu_slice(str(name), str(topology) if topology else None)
    if key == "devices":
        return s.devices * int(num_slices)
    if key == "rollout_devices":
        return s.trainer_rollout_split[1] * s.devices_per_chip * int(num_slices)
    return getattr(s, key)


def register_resolvers() -> None:
    """`${rlexp.tpu:...}` derives TPU slice values; `${rlexp.mul:a,b}` multiplies (GPU nodes x GPUs)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("rlexp.tpu"):
        OmegaConf.register_new_resolver("rlexp.tpu", _resolve_tpu)
    if not OmegaConf.has_resolver("rlexp.mul"):
        OmegaConf.register_new_resolver("rlexp.mul", lambda a, b: int(a) * int(b))


def tpu_slice_node() -> object:
    """The `slice/tpu_schema` base of every TPU slice YAML: derived fields are `rlexp.tpu` interpolations."""
    from omegaconf import OmegaConf

    from rlexp.config.schema import SliceConfig

    node = OmegaConf.structured(SliceConfig)
    node.kind = "tpu"
    args = "${.name},${.topology},${.num_slices}"
    for key in ("chips", "chips_per_vm", "vms", "accelerator", "machine_type", "instance_type", "devices"):
        node[key] = f"${{rlexp.tpu:{key},{args}}}"
    node.rollout_devices = f"${{rlexp.tpu:rollout_devices,{args}}}"
    node.hbm_gib_per_device = f"${{rlexp.tpu:hbm_gib_per_device,{args}}}"
    return node


def tpu_slice_yaml(name: str) -> str:
    """The text of conf/slice/<name>.yaml (tests keep the files equal to this)."""
    s = tpu_slice(name)
    trainer, rollout = s.trainer_rollout_split
    split = f"{trainer} trainer + {rollout} rollout chips" if rollout else "rollout colocated with the trainer"
    per_chip = f" ({s.devices_per_chip} JAX devices a chip)" if s.devices_per_chip > 1 else ""
    return (
        f"# TPU {name}: {s.topology}, {s.chips} chip{'s' if s.chips > 1 else ''}{per_chip} on {s.vms} "
        f"VM{'s' if s.vms > 1 else ''}, {split}; runs on GKE (Pathways).\n"
        "# chips, VMs, labels, machine and Pathways instance type are derived (rlexp/config/hardware.py).\n"
        "defaults:\n"
        "  - tpu_schema\n"
        "  - override /hydra/launcher@_global_.hydra.launcher: gke\n"
        "  - _self_\n"
        f"name: {name}\n"
        f"topology: {s.topology}\n"
        "mesh:\n"
        "  fsdp: -1\n"
        "  tp: 1\n"
    )


def gpu_slice_yaml(name: str) -> str:
    nodes, per_node, gpu, hbm = GPU_SLICES[name]
    where = (
        "one local GPU"
        if nodes * per_node == 1
        else f"{nodes} node{'s' if nodes > 1 else ''} x {per_node} {gpu.upper()}"
    )
    how = "runs locally" if nodes * per_node == 1 else "submit with hydra/launcher=slurm"
    return (
        f"# {where} ({how}).\n"
        "defaults:\n"
        "  - slice_schema\n"
        "  - _self_\n"
        f"name: {name}\n"
        "kind: gpu\n"
        f"nodes: {nodes}\n"
        f"gpus_per_node: {per_node}\n"
        f"gpu_type: {gpu}\n"
        "devices: ${rlexp.mul:${.nodes},${.gpus_per_node}}\n"
        f"hbm_gib_per_device: {hbm}\n"
        "mesh:\n"
        "  fsdp: -1\n"
        "  tp: 1\n"
    )


def peak_flops(s: SliceConfig) -> float:
    """The slice's dense bf16 peak FLOP/s over all its chips (TPU generation, GPU type; CPU: nominal per core).
    An accelerator missing from PEAK_FLOPS_PER_CHIP counts as an H200. MFU divides by these (H200: the ~790
    TFLOP/s a bf16 GEMM reaches); cost.PEAK keeps the data-sheet peaks and bandwidths of its roofline."""
    if s.kind == "tpu":
        chips = max(int(s.chips), 1) * max(int(s.num_slices), 1)
        return PEAK_FLOPS_PER_CHIP.get(s.name.rpartition("-")[0], PEAK_FLOPS_PER_CHIP["h200"]) * chips
    if s.kind == "gpu":
        gpus = max(int(s.nodes), 1) * max(int(s.gpus_per_node), 1)
        return PEAK_FLOPS_PER_CHIP.get(str(s.gpu_type), PEAK_FLOPS_PER_CHIP["h200"]) * gpus
    return CPU_PEAK_FLOPS_PER_CORE * (os.cpu_count() or 1)
