"""The HTML report over the synthetic sweep in tests/fixtures/runs/lr_seed (2 lr × 2 seeds + a hacked run)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import fsspec
import pytest

from rlexp.report import analyze
from rlexp.report.__main__ import main
from rlexp.report.html import render
from rlexp.report.load import Run, load
from tests.helpers import REPO
from tests.report.browser import open_report

FIXTURE = REPO / "tests" / "fixtures" / "runs" / "lr_seed"
REWARDS = REPO / "tests" / "fixtures" / "runs" / "rewards"  # a composite (arith_judge) run and a one-reward run


@pytest.fixture(scope="module")
def sweep():
    return load([str(FIXTURE)])


def test_loads_sweep_manifest(sweep) -> None:
    assert sweep.group == "lr_seed-fixture"
    assert sweep.swept_keys == ["trainer.learning_rate", "seed"]
    assert [r.state for r in sweep.runs] == ["completed"] * 4 + ["failed"]
    assert sweep.runs[0].params()["trainer.learning_rate"] == "0.001"
    assert len(sweep.runs[0].series("rewards/sum")) == 30
    assert len(sweep.runs[0].series("eval/pass_at_1")) == 3


def test_rows_group_seeds_and_sort_by_objective(sweep) -> None:
    rows = analyze.rows(sweep)
    assert [r.params for r in rows] == [
        {"trainer.learning_rate": "0.003"},
        {"trainer.learning_rate": "0.001"},
        {"trainer.learning_rate": "0.03"},
    ]
    assert [len(r.runs) for r in rows] == [2, 2, 1]
    mean, std = analyze.mean_std(rows[0].values["objective"])
    expected = [r.objective for r in sweep.runs if r.params()["trainer.learning_rate"] == "0.003"]
    assert mean == pytest.approx(sum(expected) / 2) and std is not None and std > 0


def test_health_flags_the_hacked_run_only(sweep) -> None:
    healthy, hacked = sweep.runs[:4], sweep.runs[4]
    assert all(analyze.health(r) == [] for r in healthy)
    codes = {f.code for f in analyze.health(hacked)}
    assert codes == {"failed", "length_collapse", "kl_blowup", "zero_variance", "reward_errors", "format_vs_correct"}
    # its train reward falls too, so "train up, eval down" must not fire


def synthetic(rows: list[dict], cap: int | None = None) -> Run:
    return Run(name="s", dir="s", rows=rows, config={"trainer": {"max_completion_tokens": cap}} if cap else {})


def test_health_flags_a_judge_rising_while_correctness_sags() -> None:
    codes = [f.code for f in analyze.health(load([str(REWARDS / "arith_judge")]).runs[0])]
    assert codes == ["reward_rpc_error_ratio", "judge_vs_correct"]
    assert analyze.health(load([str(REWARDS / "arith")]).runs[0]) == []


def test_health_length_cap_and_clipping_and_train_eval_divergence() -> None:
    rows = [
        {"step": s, "completions/mean_length": 2 + 6 * s / 20, "rewards/correct/clip_ratio": 0.5, "rewards/sum": s / 20}
        for s in range(1, 21)
    ]
    rows += [{"step": s, "eval/pass_at_1": 0.5 - s / 40} for s in (5, 10, 15, 20)]
    codes = {f.code for f in analyze.health(synthetic(rows, cap=8))}
    assert {"length_cap", "reward_clipping", "train_up_eval_down"} <= codes
    assert "length_drift" not in codes  # the cap flag already says it


def test_html_is_self_contained_with_wellformed_svg(sweep) -> None:
    page = render(sweep)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the report must not load anything"
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) == 4 + 2  # the curves, then the rewards of the winner and of the flagged run
    for svg in svgs:
        ET.fromstring(svg)  # well-formed XML
    assert len(page) < 60_000


def test_cli_writes_report_and_rejects_missing_dirs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "r.html"
    assert main([str(FIXTURE), "--out", str(out)]) == 0
    assert "5 runs" in capsys.readouterr().err and out.stat().st_size > 0  # a status line (rlexp.log_setup)
    assert main([str(tmp_path / "nope")]) == 2
    assert "no such run or sweep dir" in capsys.readouterr().err


def test_cli_run_dirs_without_manifest(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert main([str(FIXTURE / "0"), str(FIXTURE / "2"), "--out", str(out)]) == 0
    sweep = load([str(FIXTURE / "0"), str(FIXTURE / "2")])
    assert sweep.swept_keys == ["trainer.learning_rate"]  # the keys that differ between the given runs


def test_wandb_flag_offline_keeps_html(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    out = tmp_path / "r.html"
    assert main([str(FIXTURE), "--out", str(out), "--wandb"]) == 0
    assert "offline" in capsys.readouterr().out and out.exists()


def test_report_reads_and_writes_through_fsspec() -> None:
    fs = fsspec.filesystem("memory")
    for path in FIXTURE.rglob("*"):
        if path.is_file():
            fs.pipe(f"/bucket/sweep/{path.relative_to(FIXTURE)}", path.read_bytes())
    try:
        assert main(["memory://bucket/sweep"]) == 0
        page = fs.cat("/bucket/sweep/report.html").decode()
        assert page.count('class="run-row"') == 3
    finally:
        fs.rm("/bucket", recursive=True)


def test_report_opens_in_headless_chromium(tmp_path: Path, sweep) -> None:
    out = tmp_path / "report.html"
    assert main([str(FIXTURE), "--out", str(out)]) == 0
    page = open_report(out)
    assert page.errors == []
    assert page.title.startswith("rlexp report")
    assert page.rows == 3
    # every run has every curve: 5 runs × (reward, pass@1, KL, length), and pass@1 in the eval section
    assert page.curves == {**{metric: 5 for metric in analyze.CURVES}, "pass_at_k/1": 5}
    assert page.rewards == {sweep.runs[2].dir: ["correct", "format"], sweep.runs[4].dir: ["correct", "format"]}
    assert page.flags == len(analyze.health(sweep.runs[4]))


def test_long_runs_are_thinned_and_winner_samples_shown(sweep) -> None:
    from rlexp.report.html import MAX_POINTS, thin

    points = [(s, float(s)) for s in range(1, 1001)]
    kept = thin(points)
    assert len(kept) <= MAX_POINTS + 1 and kept[0] == points[0] and kept[-1] == points[-1]
    page = render(sweep)
    samples = re.search(r'<table id="samples">.*?</table>', page, flags=re.S)
    assert samples is not None and samples.group(0).count("<tr>") == 4  # header + 3 samples of the winner


def test_sweep_dir_without_manifest_is_read_job_by_job(tmp_path: Path) -> None:
    import shutil

    plain = tmp_path / "multirun"
    shutil.copytree(FIXTURE, plain)
    (plain / "sweep.json").unlink()
    sweep = load([str(plain)])
    assert [r.dir.rsplit("/", 1)[-1] for r in sweep.runs] == ["0", "1", "2", "3", "4"]
    assert sweep.swept_keys == ["trainer.learning_rate", "seed"]
    assert [len(r.runs) for r in analyze.rows(sweep)] == [2, 2, 1]


def reward_figures(page: str) -> list[str]:
    return re.findall(r'<figure class="chart rewards-chart".*?</figure>', page, flags=re.S)


def test_composite_rewards_share_one_chart() -> None:
    sweep = load([str(REWARDS / "arith_judge"), str(REWARDS / "arith")])
    figures = reward_figures(render(sweep))
    assert len(figures) == 1 and f'data-run="{REWARDS / "arith_judge"}"' in figures[0]
    svg = ET.fromstring(re.search(r"<svg.*?</svg>", figures[0], flags=re.S).group(0))
    curves = [el for el in svg.iter("polyline") if el.get("class", "").startswith("curve")]
    assert [el.get("data-reward") for el in curves] == ["correct", "judge", "weighted_mean"]
    assert len({el.get("stroke") for el in curves}) == 3 and "combined" in curves[-1].get("class")
    legend = re.search(r'<ul class="reward-legend">(.*?)</ul>', figures[0]).group(1)
    assert re.findall(r"</span>(\w+)", legend) == ["correct", "judge", "weighted_mean"]
    caption = re.search(r"<figcaption>(.*?)</figcaption>", figures[0]).group(1)
    # the judge's per-request health, at its peak: the RPC-error ratio health() flags, invalid answers, latency
    assert '<span class="warn">RPC errors 15%</span>' in caption and "invalid 4%" in caption
    assert "p95 latency 2 s" in caption


def test_one_reward_renders_no_rewards_chart() -> None:
    assert reward_figures(render(load([str(REWARDS / "arith")]))) == []
    # one reward under combine=weighted_mean logs the combined mean too: still one reward
    rows = [{"step": s, "rewards/correct/mean": 0.5, "rewards/weighted_mean/mean": 0.5} for s in (1, 2, 3)]
    assert analyze.reward_names(synthetic(rows)) == []
    from rlexp.rewards.compose import WEIGHTED_MEAN

    assert analyze.COMBINED == WEIGHTED_MEAN


def test_sweep_charts_rewards_of_the_winner_and_flagged_runs(sweep) -> None:
    # all 5 runs log correct + format: more than MAX_REWARD_CHARTS, so the top-ranked run and the flagged one
    assert len(sweep.runs) > analyze.MAX_REWARD_CHARTS
    assert analyze.reward_chart_runs(sweep, analyze.rows(sweep)) == [sweep.runs[2], sweep.runs[4]]
    sub = load([str(FIXTURE / "0"), str(FIXTURE / "4")])  # a few runs: each gets its chart
    assert len(analyze.reward_chart_runs(sub, analyze.rows(sub))) == 2
