"""The wandb Report spec for a sweep builds offline; only its project-id lookup is replaced here."""

from __future__ import annotations

import json

import pytest

from rlexp.report.load import load
from rlexp.report.wandb_report import build, spec
from tests.helpers import REPO

FIXTURE = REPO / "tests" / "fixtures" / "runs" / "lr_seed"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list:
    from wandb_workspaces.reports.v2 import interface

    calls: list = []

    def fake_graphql(*args, **kwargs):
        calls.append(args)
        return {"project": {"internalId": "project-internal-id"}}

    monkeypatch.setattr(interface, "execute_graphql", fake_graphql)
    monkeypatch.setattr(interface, "_get_api", lambda: None)
    return calls


def walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def test_report_spec_has_curves_comparer_parallel_coordinates_and_group_filter(no_network: list) -> None:
    sweep = load([str(FIXTURE)])
    report = build(sweep, entity="team", project="rlexp")
    data = spec(report)
    assert no_network, "the spec build should have looked up the project (replaced here)"
    text = json.dumps(data)
    views = [n["viewType"] for n in walk(data) if "viewType" in n]
    assert views.count("Run History Line Plot") == 4
    assert views.count("Parallel Coordinates Plot") == 1
    assert views.count("Run Comparer") == 1
    metrics = {m for n in walk(data) if n.get("viewType") == "Run History Line Plot" for m in n["config"]["metrics"]}
    assert metrics == {"rewards/sum", "eval/pass_at_1", "kl", "completions/mean_length"}
    assert "lr_seed-fixture" in text  # the group filter of the run set
    filters = [n for n in walk(data) if n.get("key", {}).get("name") == "group"]
    assert filters and filters[0]["value"] == "lr_seed-fixture" and filters[0]["op"] == "="
    assert data["displayName"] == "rlexp sweep lr_seed-fixture"
