"""Memory and CPU of this process and its descendants (Spark's JVM and its
Python workers), read from /proc: shared by the benchmarks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

# A sample walks all of /proc (about 2 ms of CPU here). Every 50 ms it took
# 3% of a core and slowed SparkRunner runs, which keep both cores busy, by
# about as much; the DirectRunner leaves a core free for it.
RSS_SAMPLE_S = 0.2


class PeakRss:
    """Samples the RSS of this process and its descendants (those ``counts``
    accepts by command name and pid, all by default); keeps the peak of
    their sum, of the largest one, and the most processes counted at once."""

    def __init__(self, counts: Callable[[str, int], bool] | None = None) -> None:
        self.peak = 0
        self.largest = 0
        self.processes = 0
        self._counts = counts or (lambda _name, _pid: True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_S):
            tree = process_tree(os.getpid())
            rss = [r for pid, (name, r, _) in tree.items() if self._counts(name, pid)]
            self.peak = max(self.peak, sum(rss))
            self.largest = max(self.largest, max(rss, default=0))
            self.processes = max(self.processes, len(rss))


def process_tree(root: int) -> dict[int, tuple[str, int, float]]:
    """(command name, RSS bytes, CPU seconds) of `root` and its descendants.

    CPU includes each process's reaped children, so Spark's Python workers
    that exited are counted in their daemon.
    """
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[str, int, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        cpu = sum(int(t) for t in fields[11:15]) / tick
        info[int(entry)] = (name, rss, cpu)
        children.setdefault(int(fields[1]), []).append(int(entry))
    tree, stack = {}, [root]
    while stack:
        pid = stack.pop()
        if pid in info:
            tree[pid] = info[pid]
        stack.extend(children.get(pid, []))
    return tree


def tree_rss(root: int) -> int:
    return sum(rss for _, rss, _ in process_tree(root).values())


def memory_growth(samples: list[int]) -> str:
    """A line comparing the median of the first and last thirds of RSS
    `samples` (bytes), or "" with too few to tell."""
    if len(samples) < 6:
        return ""
    third = len(samples) // 3
    first = sorted(samples[:third])[third // 2] / 2**20
    last = sorted(samples[-third:])[third // 2] / 2**20
    return (
        f"driver + JVM + workers RSS, median of first and last third: "
        f"{first:,.0f} MiB, {last:,.0f} MiB ({last / first:.2f}x)"
    )


def sample_tree_rss(seconds: float, every_s: float = 5.0) -> list[int]:
    """The RSS of this process tree every `every_s` for `seconds` (while a
    job started before the call runs)."""
    samples = []
    deadline = time.time() + seconds
    while time.time() < deadline:
        time.sleep(every_s)
        samples.append(tree_rss(os.getpid()))
    return samples
