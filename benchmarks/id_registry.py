"""Id registry registrations/s, batched vs one at a time, in the same run.

    python benchmarks/id_registry.py [--registrations 4000] [--runs 5]
        [--batch 500] [--in_flight 128] [--clicks_per_minute 1000]
        [--buckets 8] [--slice_minutes 10]

Against a Bigtable emulator (started here, or `$BIGTABLE_EMULATOR_HOST`),
registers fresh clicks of a click stream (`--clicks_per_minute` of event
time, so registry rows fill as they would in production) under the registry
layout given (`--buckets`, `--slice_minutes`):

- batched: `IdRegistry.register_many` in batches of `--batch` (what
  `RegisterJoins` does per bundle): one conditional write per registry row
  the batch touches, up to `--in_flight` of them in flight;
- one at a time (the baseline): `IdRegistry.register`, a batch of one, each
  awaited before the next.

Each run registers `--registrations` clicks both ways, each way into a
stream of its own starting on a fresh day (empty rows). Medians of the runs
are printed, then the ratio. The emulator shares the machine's cores with the
client, so absolute figures are low; the ratio is the point. Target: batched
>= 10x one at a time.
"""

import argparse
import pathlib
import statistics
import sys
import time
import uuid
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from testing.bigtable_emulator import BigtableEmulator  # noqa: E402
from transforms.photon import (  # noqa: E402
    BigtableTarget,
    ClickRef,
    IdRegistry,
    Outcome,
    RegistryLayout,
)
from transforms.photon.id_registry import COLUMNS_PER_WRITE  # noqa: E402

DAY_MS = 24 * 3600 * 1000
T0 = 1_767_571_200_000  # 2026-01-05T00:00Z


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registrations", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--in_flight", type=int, default=128)
    parser.add_argument("--clicks_per_minute", type=float, default=1000.0)
    parser.add_argument("--buckets", type=int, default=RegistryLayout.buckets)
    parser.add_argument(
        "--slice_minutes", type=float, default=RegistryLayout.slice_ms / 60_000
    )
    parser.add_argument("--columns_per_write", type=int, default=COLUMNS_PER_WRITE)
    return parser.parse_args()


def stream(day: int, n: int, clicks_per_minute: float) -> list[ClickRef]:
    """``n`` click ids of a stream starting on ``day``, in event-time order."""
    gap_ms = 60_000 / clicks_per_minute
    start = T0 + day * DAY_MS
    return [ClickRef(f"d{day}-c{i}", start + int(i * gap_ms)) for i in range(n)]


def rate(n: int, action: Callable[[], list[Outcome]]) -> float:
    """Registrations/s of ``action``, which must register ``n`` fresh clicks."""
    started = time.perf_counter()
    outcomes = action()
    elapsed = time.perf_counter() - started
    if outcomes != [Outcome.REGISTERED] * n:
        raise SystemExit("a fresh click was not registered: the benchmark is void")
    return n / elapsed


def registration_rates(args: argparse.Namespace) -> dict[str, list[float]]:
    layout = RegistryLayout(args.buckets, int(args.slice_minutes * 60_000))
    target = BigtableTarget("bench", f"bench-{uuid.uuid4().hex[:8]}")
    registry = IdRegistry(
        target,
        gc_days=3,
        layout=layout,
        max_in_flight=args.in_flight,
        columns_per_write=args.columns_per_write,
    )

    def batched(clicks: list[ClickRef]) -> list[Outcome]:
        outcomes = []
        for start in range(0, len(clicks), args.batch):
            batch = clicks[start : start + args.batch]
            outcomes += registry.register_many(batch, "bench")
        return outcomes

    def one_at_a_time(clicks: list[ClickRef]) -> list[Outcome]:
        return [registry.register(click, "bench") for click in clicks]

    n = args.registrations
    rates: dict[str, list[float]] = {"batched": [], "one": []}
    try:
        registry.register_many(stream(0, 200, args.clicks_per_minute), "bench")
        for run in range(args.runs):
            b_clicks = stream(1 + 2 * run, n, args.clicks_per_minute)
            o_clicks = stream(2 + 2 * run, n, args.clicks_per_minute)
            rates["batched"].append(rate(n, lambda c=b_clicks: batched(c)))
            rates["one"].append(rate(n, lambda c=o_clicks: one_at_a_time(c)))
    finally:
        registry.close()
    return rates


def main() -> None:
    args = parse_args()
    with BigtableEmulator() as emulator:
        print(f"Bigtable emulator: {emulator.source} at {emulator.host}")
        rates = registration_rates(args)
    median = {name: statistics.median(values) for name, values in rates.items()}
    batched, one = median["batched"], median["one"]
    print(
        f"\nRegistrations/s, median of {args.runs} runs of {args.registrations} "
        f"(stream of {args.clicks_per_minute:g} clicks/min; layout "
        f"{args.buckets} buckets x {args.slice_minutes:g}-minute slices)"
    )
    rows = [
        (f"batched ({args.batch}/batch, {args.in_flight} in flight)", batched),
        ("one at a time (IdRegistry.register)", one),
    ]
    for label, value in rows:
        print(f"  {label:<44} {value:8.0f}")
    print(f"  {'ratio batched / one at a time':<44} {batched / one:7.1f}x")
    for name, values in rates.items():
        print(f"  all {name}: {', '.join(f'{v:.0f}' for v in values)}")


if __name__ == "__main__":
    main()
