"""Id registry registrations/s, batched vs one at a time, and Photon joins/s.

    python benchmarks/id_registry.py [--registrations 4000] [--runs 5]
                                     [--num_queries 2000] [--pipeline_runs 3]

Against a Bigtable emulator (started here, or `$BIGTABLE_EMULATOR_HOST`):

1. Registrations/s of fresh click ids. Batched: `IdRegistry.register_many`
   in batches of `--batch` with `--in_flight` conditional inserts in flight
   (what `RegisterJoins` does per bundle). Baselines, one at a time:
   `IdRegistry.register` (the same raw-channel RPC, awaited one by one), and
   google-cloud-bigtable's `Table.check_and_mutate_row` (the unbatched way
   to write with the standard client). Ratios are batched / baseline.
2. The Photon pipeline (`pipelines.photon.build` + `PhotonJoin`) on the
   DirectRunner over generated logs of `--num_queries` queries: joined
   clicks/s, wall time of the whole run over joined clicks.

Medians of the runs are printed. The emulator shares the machine's cores
with the client, so absolute figures are low; the ratios are the point.
Target: batched >= 10x one at a time.
"""

import argparse
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
import warnings

import apache_beam as beam

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from pipelines.outputs import read_output  # noqa: E402
from pipelines.photon import build  # noqa: E402
from testing.bigtable_emulator import BigtableEmulator  # noqa: E402
from testing.photon_generator import PhotonSpec, generate  # noqa: E402
from transforms.millwheel.bigtable_tables import ID_REGISTRY_FAMILY  # noqa: E402
from transforms.photon import (  # noqa: E402
    JOINED,
    BigtableTarget,
    IdRegistry,
    PhotonJoin,
    RegistryParams,
)
from transforms.photon.id_registry import TOKEN_COLUMN, row_key  # noqa: E402
from transforms.records.photon_pb2 import JoinedClick  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registrations", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--in_flight", type=int, default=128)
    parser.add_argument("--num_queries", type=int, default=2000)
    parser.add_argument("--pipeline_runs", type=int, default=3)
    return parser.parse_args()


def fresh_target() -> BigtableTarget:
    return BigtableTarget("bench", f"bench-{uuid.uuid4().hex[:8]}")


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def rate(n: int, action) -> float:
    started = time.perf_counter()
    action()
    return n / (time.perf_counter() - started)


def registration_rates(args: argparse.Namespace) -> dict[str, list[float]]:
    target = fresh_target()
    registry = IdRegistry(target, gc_days=3, max_in_flight=args.in_flight)
    from google.cloud.bigtable.data import BigtableDataClient, SetCell
    from google.cloud.bigtable.data import row_filters as rf

    client = BigtableDataClient(project=target.project)
    table = client.get_table(target.instance_id, target.registry_table)
    exists = rf.RowFilterChain(
        [rf.FamilyNameRegexFilter(ID_REGISTRY_FAMILY), rf.CellsColumnLimitFilter(1)]
    )

    def batched(batch_ids: list[str]) -> None:
        for start in range(0, len(batch_ids), args.batch):
            registry.register_many(batch_ids[start : start + args.batch], "bench")

    def client_one_by_one(batch_ids: list[str]) -> None:
        for click_id in batch_ids:
            table.check_and_mutate_row(
                row_key(click_id),
                exists,
                false_case_mutations=[SetCell(ID_REGISTRY_FAMILY, TOKEN_COLUMN, b"b")],
            )

    # Baselines get a quarter of the ids: they are slow, and rates do not
    # depend on the count once past warm-up.
    single_n = max(100, args.registrations // 4)
    rates: dict[str, list[float]] = {"batched": [], "one": [], "client": []}
    try:
        registry.register_many(ids("warmup", 200), "bench")
        for run in range(args.runs):
            n = args.registrations
            b_ids, o_ids, c_ids = (ids(f"{k}{run}", n) for k in "boc")
            rates["batched"].append(rate(n, lambda b_ids=b_ids: batched(b_ids)))
            one = o_ids[:single_n]
            rates["one"].append(
                rate(single_n, lambda one=one: [registry.register(i, "b") for i in one])
            )
            cl = c_ids[:single_n]
            rates["client"].append(rate(single_n, lambda cl=cl: client_one_by_one(cl)))
    finally:
        client.close()
        registry.close()
    return rates


def pipeline_rates(args: argparse.Namespace) -> tuple[list[float], int]:
    logs = generate(PhotonSpec(num_queries=args.num_queries), seed=1)
    rates = []
    with tempfile.TemporaryDirectory() as tmp:
        queries, clicks = logs.write(pathlib.Path(tmp) / "logs")
        for run in range(args.pipeline_runs):
            output = pathlib.Path(tmp) / f"out{run}"
            transform = PhotonJoin(
                fresh_target(), "bench", registry=RegistryParams(now_ms=logs.now_ms)
            )
            pipeline = beam.Pipeline()
            build(pipeline, [str(queries)], [str(clicks)], None, transform, output)
            started = time.perf_counter()
            pipeline.run().wait_until_finish()
            elapsed = time.perf_counter() - started
            joined = len(read_output(output, JOINED, JoinedClick))
            if joined != len(logs.joinable):
                raise SystemExit(f"joined {joined}, expected {len(logs.joinable)}")
            rates.append(joined / elapsed)
    return rates, len(logs.clicks)


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", "Connecting to Bigtable emulator")
    with BigtableEmulator() as emulator:
        print(f"Bigtable emulator: {emulator.source} at {emulator.host}")
        rates = registration_rates(args)
        median = {name: statistics.median(values) for name, values in rates.items()}
        batched, one, client = median["batched"], median["one"], median["client"]
        rows = [
            (f"batched ({args.batch}/batch, {args.in_flight} in flight)", batched),
            ("one at a time, IdRegistry.register", one),
            ("one at a time, Table.check_and_mutate_row", client),
        ]
        print(f"\nRegistrations/s, median of {args.runs} runs")
        for label, value in rows:
            print(f"  {label:<44} {value:8.0f}")
        print(f"  {'ratio batched / IdRegistry.register':<44} {batched / one:7.1f}x")
        print(
            f"  {'ratio batched / check_and_mutate_row':<44} {batched / client:7.1f}x"
        )
        joins, clicks = pipeline_rates(args)
        print(
            f"\nPhoton pipeline (DirectRunner, {args.num_queries} queries, "
            f"{clicks} clicks): {statistics.median(joins):.0f} joined clicks/s, "
            f"median of {args.pipeline_runs} runs "
            f"(all: {', '.join(f'{r:.0f}' for r in joins)})"
        )


if __name__ == "__main__":
    main()
