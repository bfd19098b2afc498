"""The random-kill campaign's figures over its tests (one or two workloads each, maybe on several pytest-xdist
workers): each test records its counts and workloads as the `random_kills` property, and the session's summary
adds them up."""

from __future__ import annotations

import pytest

from tests.faults import figures_line


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    parts = [
        dict(report.user_properties)["random_kills"]
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", None) == "call" and "random_kills" in dict(getattr(report, "user_properties", []))
    ]
    if parts:
        total = {k: sum(p[k] for p in parts) for k in parts[0]}
        terminalreporter.write_line(f"{figures_line(total)} ({total.get('workloads', len(parts))} workloads)")
