"""Where a benchmark's figures hold: the CPU they were measured on and the load around them.

A ratio of runs alternated side by side is the figure each script prints, and it depends on the CPU (the same
default GRPO workload measured TRL/rlexp 1.95 on a Zen 5 EPYC and 1.59-1.62 on a quiet Zen 4 one) and on other
work sharing the cores (2.50 on the Zen 4 under contention: torch's OpenMP threads suffer more from it than
XLA's). Every script prints `header()` before its runs and `LoadWatch.report()` after them; a ratio measured
while other work used the cores is flagged, not silently printed beside the quiet ones.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# Other work was running when the 1-minute load average, before the benchmark started, exceeded this.
BUSY_BEFORE = 0.5


def cpu_model(cpuinfo: str | None = None) -> str:
    """'AMD EPYC (family 25, model 17), 2 cores': the first CPU of /proc/cpuinfo and the cores this process sees."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    info: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    name = info.get("model name") or platform.processor() or platform.machine()
    family = (
        f" (family {info['cpu family']}, model {info['model']})" if "cpu family" in info and "model" in info else ""
    )
    return f"{name}{family}, {len(os.sched_getaffinity(0))} cores"


def header() -> str:
    """The lines a benchmark prints first: the CPU and the load it starts under."""
    one, five, _ = os.getloadavg()
    return f"CPU: {cpu_model()}\nload average before: {one:.2f} (1 min), {five:.2f} (5 min)"


class LoadWatch:
    """The load average before and after a benchmark's runs, and whether other work shared the cores.

    The benchmark itself runs one process at a time (the sides alternate), which loads at most every core this
    process may use; a load beyond that after the runs, or any load worth the name before them, was other work.
    """

    def __init__(self, before: float | None = None, cores: int | None = None) -> None:
        self.before = os.getloadavg()[0] if before is None else before
        self.cores = cores or len(os.sched_getaffinity(0))

    def contended(self, after: float) -> str | None:
        """Why the figures are not a quiet machine's, or None when they are."""
        if self.before > BUSY_BEFORE:
            return f"load {self.before:.2f} before the runs started: other work was using the cores"
        if after > self.cores + BUSY_BEFORE:
            return f"load {after:.2f} after the runs on {self.cores} cores: more than this benchmark's own processes"
        return None

    def report(self, after: float | None = None) -> str:
        """The closing lines: the load before and after, and a flag when other work shared the cores."""
        after = os.getloadavg()[0] if after is None else after
        line = f"load average before {self.before:.2f}, after {after:.2f} on {self.cores} cores"
        why = self.contended(after)
        if why is None:
            return line + "; quiet: the ratios above are this CPU's"
        return line + f"\nCONTENDED: {why}; the ratios above hold for this load only (rerun on a quiet machine)"
