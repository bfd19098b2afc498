"""The slice table: derived values, the shipped YAML files, and what a slice selects."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.config.hardware import GPU_SLICES, TPU_TOPOLOGIES, gpu_slice_yaml, tpu_slice, tpu_slice_yaml
from rlexp.config.load import CONF_DIR
from rlexp.errors import ConfigError
from tests.helpers import compose_conf


@pytest.mark.parametrize(
    ("name", "topology", "chips", "vms", "label", "machine", "instance"),
    [
        ("v6e-32", "4x8", 32, 8, "tpu-v6e-slice", "ct6e-standard-4t", "tpuv6e:4x8"),
        ("v5p-64", "2x4x4", 32, 8, "tpu-v5p-slice", "ct5p-hightpu-4t", "tpuv5:2x4x4"),
        ("v6e-1", "1x1", 1, 1, "tpu-v6e-slice", "ct6e-standard-1t", "tpuv6e:1x1"),
        ("v5litepod-256", "16x16", 256, 64, "tpu-v5-lite-podslice", "ct5lp-hightpu-4t", "tpuv5e:16x16"),
        ("v5p-8", "2x2x1", 4, 1, "tpu-v5p-slice", "ct5p-hightpu-4t", "tpuv5:2x2x1"),
        ("v7x-128", "4x4x4", 64, 16, "tpu7x", "tpu7x-standard-4t", "tpu7x:4x4x4"),
        ("v7x-8", "2x2x1", 4, 1, "tpu7x", "tpu7x-standard-4t", "tpu7x:2x2x1"),
    ],
)
def test_tpu_table(name: str, topology: str, chips: int, vms: int, label: str, machine: str, instance: str) -> None:
    s = tpu_slice(name)
    assert (s.topology, s.chips, s.vms, s.accelerator, s.machine_type, s.instance_type) == (
        topology,
        chips,
        vms,
        label,
        machine,
        instance,
    )
    assert s.vms * s.chips_per_vm == s.chips


def test_every_shipped_slice_file_matches_the_table() -> None:
    """The YAML files carry name + topology only; everything else is derived (never typed twice)."""
    d = Path(CONF_DIR) / "slice"
    for name in TPU_TOPOLOGIES:
        assert (d / f"{name}.yaml").read_text() == tpu_slice_yaml(name), name
    for name in GPU_SLICES:
        assert (d / f"{name}.yaml").read_text() == gpu_slice_yaml(name), name


def _launcher_target(overrides: list[str]) -> str:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        return compose("config", overrides=overrides, return_hydra_config=True).hydra.launcher._target_


def test_composed_tpu_slice_has_derived_fields_and_selects_gke() -> None:
    s = compose_conf(["slice=v6e-32"]).slice
    assert (s.kind, s.chips, s.vms, s.chips_per_vm, s.devices) == ("tpu", 32, 8, 4, 32)
    assert (s.accelerator, s.machine_type, s.instance_type) == ("tpu-v6e-slice", "ct6e-standard-4t", "tpuv6e:4x8")
    assert s.rollout_devices == 16  # multi-host: half the chips sample (MaxText's 0.5/0.5 split)
    assert _launcher_target(["slice=v6e-32"]).endswith("GkeLauncher")
    assert _launcher_target(["slice=cpu"]).endswith("BasicLauncher")
    assert _launcher_target(["slice=v6e-32", "hydra/launcher=basic"]).endswith("BasicLauncher")


def test_gpu_slices() -> None:
    s = compose_conf(["slice=gpu-2x8xh200"]).slice
    assert (s.kind, s.nodes, s.gpus_per_node, s.devices) == ("gpu", 2, 8, 16)
    assert compose_conf(["slice=h200"]).slice.devices == 1


def test_topology_that_contradicts_the_name_is_rejected() -> None:
    with pytest.raises(ConfigError, match="v6e-32 has 32 chips"):
        tpu_slice("v6e-32", "4x4")
    with pytest.raises(ConfigError, match="generation"):
        tpu_slice("v9z-8")


def test_v7x_chips_are_two_devices_each_and_unpriced() -> None:
    """The MaxText MoE scripts' v7x 4x4x4: 64 chips, 128 JAX devices (64 sample), 96 GiB of HBM a device."""
    from rlexp.estimates.cost import estimate_cost, roofline_step_s

    cfg = compose_conf(["slice=v7x-128"])
    s = cfg.slice
    assert (s.chips, s.vms, s.chips_per_vm, s.devices, s.rollout_devices) == (64, 16, 4, 128, 64)
    assert s.hbm_gib_per_device == 96.0 and tpu_slice("v7x-128").hbm_gib_per_chip == 192.0
    est = estimate_cost(compose_conf(["slice=v7x-128", "cost.step_time_s=60", "trainer.max_steps=60"]))
    assert est["chips"] == 64 and est["chip_hours"] == pytest.approx(64.0, rel=0.05)
    assert est["cost_usd"] is None and "cost.price_per_chip_hour" in est["price_source"]
    priced = estimate_cost(compose_conf(["slice=v7x-128", "cost.step_time_s=60", "cost.price_per_chip_hour=3"]))
    assert priced["cost_usd"] == pytest.approx(priced["chip_hours"] * 3, rel=1e-6)
    assert roofline_step_s(cfg) is not None
