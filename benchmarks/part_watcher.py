"""When each line of a live job's output parts first appears on disk: shared
by the live benchmarks."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path


class PartWatcher:
    """Scans `output` every 50 ms for new `<name>-*.jsonl` parts (a part is
    written whole, by a rename, and never again), and calls
    `on_line(name, record, seen_at)` for each of their lines; a last scan
    runs when the block ends."""

    def __init__(
        self,
        output: Path,
        names: Sequence[str],
        on_line: Callable[[str, dict, float], None],
    ) -> None:
        self._output = output
        self._names = list(names)
        self._on_line = on_line
        self._seen: set[Path] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> PartWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._scan()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            self._scan()

    def _scan(self) -> None:
        now = time.time()
        for name in self._names:
            for path in self._output.glob(f"{name}-*.jsonl"):
                if path in self._seen:
                    continue
                self._seen.add(path)
                for line in path.read_text().splitlines():
                    self._on_line(name, json.loads(line), now)
