"""Sweep fan-out: rlexp's sweeper and the shared composition give every job exactly what Hydra composes for it,
bad values still fail as one line, and the CRD-schema shape cache agrees with the full validation."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf, open_dict

from rlexp.config.hardware import tpu_slice
from tests.launch.conftest import run_cli

BASE = ["model=gemma4_e4b", "slice=v6e-32"]


def _hydras(launcher: object, overrides: list[str], idx: int) -> tuple[dict, dict, object]:
    """(raw, resolved, hydra node) of Hydra's own per-job composition."""
    full = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, overrides)  # type: ignore[attr-defined]
    hc = full.hydra
    with open_dict(full):
        full.pop("hydra")
    return OmegaConf.to_container(full, resolve=False), OmegaConf.to_container(full, resolve=True), hc  # type: ignore[return-value]


@pytest.mark.parametrize(
    "jobs",
    [
        # run_name interpolates a swept value: the job's run_name is re-resolved with the job's seed
        [[*BASE, "run_name=exp-${seed}", f"seed={s}"] for s in (3, 7)],
        # the default run_name, a float, a slice value feeding resolvers, a list item, a leaf that defaults to null
        [
            [*BASE, "seed=4", "trainer.learning_rate=3e-06"],
            [*BASE, "slice.num_slices=2", "seed=1"],
            [*BASE, "reward.functions.0.weight=2.0", "trainer.top_k=50"],
            [*BASE, "trainer.beta=0.0", "seed=4", "seed=5"],  # the last of two wins, as in Hydra
        ],
    ],
)
def test_shared_composition_equals_hydras(tmp_path: Path, make_launcher: object, jobs: list[list[str]]) -> None:
    from rlexp.launch.compose import SweepComposer

    launcher = make_launcher(tmp_path, *BASE, "hydra.launcher.dry_run=true")  # type: ignore[operator]
    composer = SweepComposer(launcher.hydra_context.config_loader, launcher.config)
    for idx, overrides in enumerate(jobs):
        fast = composer.compose(overrides, idx)
        raw, resolved, hc = _hydras(launcher, overrides, idx)
        assert fast.raw == raw
        assert fast.resolved == resolved
        assert OmegaConf.to_container(fast.task, resolve=False) == raw  # the DictConfig, built on demand
        dirname = OmegaConf.to_container(fast.hydra.hydra.job, resolve=False)["override_dirname"]  # type: ignore[index]
        assert dirname == OmegaConf.to_container(hc.job, resolve=False)["override_dirname"]  # type: ignore[index]
        assert OmegaConf.to_container(fast.hydra.hydra.overrides.task, resolve=False) == overrides
        assert fast.out_dir == tmp_path / str(idx)
    for base in composer.bases.values():  # overrides were undone on the shared composition
        assert OmegaConf.to_container(base.task, resolve=False) == base.raw
    assert composer.full_compositions == 1
    assert composer.compose(jobs[0], 0) is composer.compose(list(jobs[0]), 0)  # remembered for the launcher


def test_a_bad_value_raises_hydras_error_and_leaves_the_shared_composition_as_it_was(
    tmp_path: Path, make_launcher: object
) -> None:
    from hydra.errors import ConfigCompositionException

    from rlexp.launch.compose import SweepComposer

    launcher = make_launcher(tmp_path, *BASE, "hydra.launcher.dry_run=true")  # type: ignore[operator]
    composer = SweepComposer(launcher.hydra_context.config_loader, launcher.config)
    good = composer.compose([*BASE, "seed=1"], 0)
    with pytest.raises(ConfigCompositionException) as fast_err:
        composer.compose([*BASE, "seed=4", "trainer.learning_rate=x"], 1)  # seed is set before the bad value
    with pytest.raises(ConfigCompositionException) as hydra_err:
        _hydras(launcher, [*BASE, "seed=4", "trainer.learning_rate=x"], 1)
    assert str(fast_err.value) == str(hydra_err.value)
    assert str(fast_err.value.__cause__) == str(hydra_err.value.__cause__)
    (base,) = composer.bases.values()
    assert OmegaConf.to_container(base.task, resolve=False) == base.raw
    assert composer.compose([*BASE, "trainer.beta=0.0"], 2).resolved["seed"] == 0
    assert good.resolved["seed"] == 1


def _files(sweep: Path) -> dict[str, str]:
    skip = ("launcher.json", "sweep.json", "report.html", "multirun.yaml")
    return {
        str(p.relative_to(sweep)): p.read_text() for p in sorted(sweep.rglob("*")) if p.is_file() and p.name not in skip
    }


@pytest.mark.slow
def test_cli_sweep_writes_what_hydras_basic_sweeper_does_and_composes_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    monkeypatch.delenv("KUBECONFIG", raising=False)
    calls = []
    original = ConfigLoaderImpl.load_sweep_config

    def counted(self: object, master_config: object, sweep_overrides: list[str]) -> object:
        calls.append(list(sweep_overrides))
        return original(self, master_config, sweep_overrides)  # type: ignore[arg-type]

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counted)
    args = ["-m", *BASE, "hydra.launcher.dry_run=true", "seed=0,1,2", "trainer.learning_rate=1e-6,3e-6"]
    assert run_cli(monkeypatch, *args, f"hydra.sweep.dir={tmp_path / 'rlexp'}") == 0
    assert len(calls) == 1  # one composition for six jobs, shared by the sweeper's validation and the launcher
    calls.clear()
    batched = [*args, "hydra.sweeper.max_batch_size=4", f"hydra.sweep.dir={tmp_path / 'batched'}"]
    assert run_cli(monkeypatch, *batched) == 0  # batches of 4 and 2: job numbers continue across batches
    assert len(calls) == 1
    calls.clear()
    assert run_cli(monkeypatch, *args, "hydra/sweeper=basic", f"hydra.sweep.dir={tmp_path / 'hydra'}") == 0
    assert len(calls) >= 6  # Hydra's sweeper composes every job
    capsys.readouterr()
    ours, hydras = _files(tmp_path / "rlexp"), _files(tmp_path / "hydra")
    assert len([f for f in ours if f.endswith("jobset.yaml")]) == 6
    assert ours == hydras
    batched_files = _files(tmp_path / "batched")
    assert batched_files.pop("4/validation.json")  # each launch (batch) runs the once-per-launch preflight
    assert batched_files == ours


@pytest.mark.parametrize(
    ("swept", "message"),
    [
        ("seed=1,abc", "rlexp: error: seed='abc': "),
        ("trainer.learning_rate=1e-6,x", "rlexp: error: trainer.learning_rate='x': "),
    ],
)
def test_a_bad_value_in_a_sweep_is_one_line_before_any_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, swept: str, message: str
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    rc = run_cli(monkeypatch, "-m", *BASE, "hydra.launcher.dry_run=true", swept, f"hydra.sweep.dir={tmp_path}")
    lines = capsys.readouterr().err.strip().splitlines()  # the sweep table (stderr) comes first
    assert rc == 2
    assert lines[-1].startswith(message) and [x for x in lines if x.startswith("rlexp: error")] == lines[-1:]
    assert not list(tmp_path.glob("*/jobset.yaml"))


def test_sweep_presets_pick_their_own_sweeper() -> None:
    from hydra import compose, initialize_config_dir

    from rlexp.config.load import CONF_DIR, register_configs

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):

        def target(*overrides: str) -> str:
            return str(compose("config", list(overrides), return_hydra_config=True).hydra.sweeper._target_)

        assert target() == "hydra_plugins.rlexp_launchers.sweeper.BasicSweeper"
        assert "optuna" in target("+sweep=optuna_lr").lower()
        assert target("+sweep=lr_beta") == target()
        assert target("hydra/sweeper=basic") == "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def _manifests(n: int) -> list[dict]:
    from rlexp.config.launcher import GkeLauncherConf
    from rlexp.launch.manifest import JobSpec, render

    tpu = tpu_slice("v6e-32")
    out = []
    for i in range(n):
        spec = JobSpec(
            name=f"job-{i}",
            slice=tpu,
            num_slices=1,
            args=[*BASE, f"seed={i}", f"output_dir=gs://b/job-{i}"],
            output_dir=f"gs://b/job-{i}",
            run_name=f"run-{i}",
        )
        out.append(render(spec, GkeLauncherConf()))
    return out


def test_schema_shape_cache_agrees_with_the_full_validation() -> None:
    from rlexp.launch import jobset_checks

    first, *others = _manifests(4)
    assert jobset_checks.schema_errors(first) == []  # validated in full, then remembered by shape
    assert all(jobset_checks._SHAPES.is_valid(m) for m in others)
    bad = copy.deepcopy(others[0])
    bad["spec"]["successPolicy"]["operator"] = "Most"  # same shape, a value the enum refuses
    assert not jobset_checks._SHAPES.is_valid(bad)
    assert jobset_checks.schema_errors(bad) == [
        e
        for e in (
            f"{'.'.join(map(str, x.absolute_path))}: {x.message}" for x in jobset_checks._validator().iter_errors(bad)
        )
    ]
    assert jobset_checks.schema_errors(bad) and "operator" in jobset_checks.schema_errors(bad)[0]
    other_shape = copy.deepcopy(others[1])
    other_shape["spec"]["replicatedJobs"][0]["replicas"] = "1"  # a string where an integer belongs: a new shape
    assert jobset_checks.schema_errors(other_shape)


def test_section_dumps_equal_one_dump_of_the_whole() -> None:
    from rlexp.launch.gke import _SectionDumps
    from rlexp.launch.yaml_text import _Dumper

    dumps = _SectionDumps()
    data = {"a": {"b": [1, "x y", {"c": None}], "long": "w " * 60}, "e": [], "f": {}, "g": "yes", "h": 1.5e-7}
    for _ in range(2):
        assert dumps.dump(data) == yaml.dump(data, Dumper=_Dumper, sort_keys=False)
    assert dumps.dump({}) == yaml.dump({}, Dumper=_Dumper, sort_keys=False)


def test_yaml_writer_equals_pyyaml_and_takes_manifests_itself() -> None:
    import random

    from rlexp.launch import yaml_text

    rng = random.Random(0)
    words = ["a", "on", "", "it's", "1e3", "- x", "#a", "a: b", "$(X)", "é", "x\ny", "Null", "0755", "12:30"]
    words += ["gs://b/x-1", "a b", "w " * 50, "k" * 130, "true", " lead", "--flag=$(HEAD):29000"]

    def value(depth: int) -> object:
        r = rng.random()
        if depth > 3 or r < 0.5:
            return rng.choice([rng.choice(words), rng.randint(-5, 10**9), rng.choice([0.5, 1e-7, 3e16]), True, None])
        if r < 0.75:
            return {
                rng.choice(words) if rng.random() < 0.3 else f"k{i}": value(depth + 1) for i in range(rng.randint(0, 3))
            }
        return [value(depth + 1) for _ in range(rng.randint(0, 3))]

    for _ in range(400):
        data = {f"k{i}": value(1) for i in range(rng.randint(0, 4))} if rng.random() < 0.5 else [value(1)]
        assert yaml_text.dump(data) == yaml.dump(data, Dumper=yaml_text._Dumper, sort_keys=False)
    for manifest in _manifests(2):
        out: list[str] = []
        yaml_text._mapping(manifest, 0, out)  # raises _Hard if it would hand the manifest to PyYAML
        assert "".join(out) == yaml.dump(manifest, Dumper=yaml_text._Dumper, sort_keys=False)


def test_numbers_parse_as_hydras_grammar_parses_them() -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rlexp.launch.compose import SweepComposer

    composer = SweepComposer(None, None)  # type: ignore[arg-type]
    texts = ["0", "7", "-3", "+12", "1000000", "007", "1_000", "1.", ".5", "0.25", "-2.5e-3", "1e-06", "3E+2", "1.5e7"]
    texts += ["1e", "inf", "nan", "1..2", "0x1F", "1 ", "abc", "1.0.0", "01.5", "-", "+.5e1"]
    grammar = OverridesParser.create()
    for key in ("seed", "trainer.learning_rate"):
        for text in texts:
            line = f"{key}={text}"
            (fast,) = composer._parse([line])
            (slow,) = grammar.parse_overrides([line])
            assert (repr(fast), type(fast.value())) == (repr(slow), type(slow.value())), line  # repr: nan != nan
    assert len(composer._numbers) == 4  # (seed, int), (seed, float), and the same for trainer.learning_rate


def test_job_files_are_read_after_one_listing(tmp_path: Path) -> None:
    from rlexp import storage
    from rlexp.sweep import manifest

    job = tmp_path / "0"
    storage.write_json(str(job / "launcher.json"), {"launcher": "gke", "handle": "h", "output_dir": "memory://runs/0"})
    storage.write_json("memory://runs/0/summary.json", {"status": "completed", "eval": {"after": {"pass_at_1": 0.5}}})
    assert storage.list_names(str(job)) == {"launcher.json"}
    assert storage.list_names("memory://runs/0") == {"summary.json"}
    assert storage.list_names(str(tmp_path / "missing")) is None
    found = manifest.read_job_files(str(job), "eval.after.pass_at_1")
    assert found["state"] == "completed" and found["objective"] == 0.5 and found["run_dir"] == "memory://runs/0"
    assert manifest.read_job_files(str(job), "eval.after.pass_at_1", names=set()) == {}  # listed empty: nothing read
