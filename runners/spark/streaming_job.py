"""The driver loop of a streaming pipeline: micro-batches, checkpoints, restart.

Each batch N:

1. is planned from the last committed position: its processing time (the
   wall clock, or the TestStream's scripted clock), its watermarks
   (``watermark_manager.py``), the key groups with a due timer, the
   deferred remainders whose delay has passed, the Impulse (first batch
   only) and, once the pipeline is quiescent, the next TestStream step;
2. is logged in ``offsets/N`` before it runs;
3. runs as one Spark job (``micro_batch.py``), whose tasks commit their key
   groups' state as they end;
4. is committed in ``commits/N`` with the position after it: sources'
   positions, every key group's next timers and hold, pending remainders,
   the watermarks it ran with, and the job's user metrics so far.

On restart the last commit is loaded; a batch logged in ``offsets`` but not
committed is replayed from its log (same TestStream events, same processing
time), and the key groups undo what its earlier attempt wrote. A stop asked
for with ``cancel()`` takes effect between batches, after a commit.

The job ends by itself when every source has finished, every watermark is
+inf and no event-time timer is pending. Processing-time timers still set
then are reported and dropped: no clock will make them due.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

from apache_beam.runners import runner

from runners.spark.checkpoint import CheckpointDir, CheckpointUnusable
from runners.spark.drain_plan import truncation_targets
from runners.spark.driver_stages import IMPULSE
from runners.spark.durable_store import GroupSummary, key_group_file
from runners.spark.errors import driver_lost, from_spark_exception, job_aborted
from runners.spark.job_position import JobPosition, Remainder
from runners.spark.metrics import MetricsSnapshot
from runners.spark.micro_batch import BatchSpec, MicroBatchTranslator, stage_key
from runners.spark.micro_batch_task import Deferred, PushedBack, SideChunk
from runners.spark.progress import BatchProgress
from runners.spark.side_contents import SideContents
from runners.spark.side_expiry import Horizon
from runners.spark.test_stream_source import TEST_STREAM_URN, ScriptedStream
from runners.spark.watermark import MAX_MICROS, MIN_MICROS, event_horizon
from runners.spark.watermark_manager import WatermarkManager, Watermarks

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamingSettings:
    """The streaming options, resolved."""

    checkpoint_dir: str | None
    key_groups: int
    batch_interval: float
    # Seconds a source's watermark may stand still before it follows the
    # clock (delayed by as much); 0: a source holds for as long as it likes.
    idle_timeout: float = 0.0
    # Records a source's bundle may output in one batch (None: no cap).
    max_records: int | None = None
    # Drain from the first batch (Beam's FnApiRunner(is_drain=True)).
    start_drained: bool = False
    # Seconds between the INFO lines summing up committed batches (0: none).
    progress_seconds: float = 30.0


class StreamingJob:
    """One streaming pipeline's driver loop (run in a background thread)."""

    def __init__(
        self, plan, drain_plan, sc, spark_options, settings: StreamingSettings
    ):
        if settings.checkpoint_dir:
            path = settings.checkpoint_dir
        else:
            path = tempfile.mkdtemp(prefix="millwheel-checkpoint-")
            _LOGGER.info(
                "SparkRunner streaming: no --checkpoint_dir given; checkpoints "
                "go to the fresh directory %s (a restart cannot resume from it "
                "unless it is passed; deleted if the job finishes)",
                path,
            )
        # A directory of our own making is deleted once the job finishes:
        # there is nothing left to resume, and nobody else knows its name.
        self._temporary = not settings.checkpoint_dir
        self.checkpoint = CheckpointDir(path)
        self._sc, self._spark_options = sc, spark_options
        self._settings = settings
        # The optimised pipeline before and while draining (drain_plan.py).
        self._plans = {False: plan, True: drain_plan}
        # What side inputs hold after the committed batches.
        self._side_contents = SideContents()
        # Held until `run` returns: released on any refusal before that.
        self.checkpoint.claim()
        try:
            self._use_plan(draining=False)
        except BaseException:
            self.checkpoint.release()
            raise
        self.state = runner.PipelineState.STOPPED
        self.error: BaseException | None = None
        self.position = JobPosition(
            test_streams=dict.fromkeys(self._scripts, 0),
        )
        self._stop = threading.Event()
        self._drain = threading.Event()
        self._progress = BatchProgress(settings.progress_seconds)
        if settings.start_drained:
            self._drain.set()

    def _use_plan(self, draining: bool) -> None:
        """Translates the plan the job runs from now on. Both plans have the
        same keyed stages (the checkpoint refuses otherwise): a drain
        changes how splittable DoFns run, not where state lives."""
        translator = MicroBatchTranslator(
            self._plans[draining],
            self._sc,
            self._spark_options,
            str(self.checkpoint.root / "state"),
            self._settings.key_groups,
            self._settings.max_records,
        )
        self.checkpoint.bind(
            {
                "keyed_stages": sorted(translator.keyed_stages()),
                "windowing": translator.keyed_windowing(),
                "state_params": translator.state_params(),
                "key_groups": self._settings.key_groups,
            }
        )
        translator.set_side_contents(self._side_contents.chunks())
        self._translator = translator
        primitives = translator.primitives
        self._watermarks = WatermarkManager(primitives)
        self._impulse_outputs = [
            pc for p in primitives if p.spec.urn == IMPULSE for pc in p.outputs.values()
        ]
        components = translator.components_bytes
        windowed = translator.windowed_coders
        self._scripts = {
            p.unique_name: ScriptedStream(p, components, windowed)
            for p in primitives
            if p.spec.urn == TEST_STREAM_URN
        }

    # -- the loop ------------------------------------------------------------

    def run(self) -> None:
        """Runs batches until the pipeline finishes or a stop is asked for."""
        self.state = runner.PipelineState.RUNNING
        try:
            resumed_after = self._restore()
            ran = False
            while not self._stop.is_set():
                spec = self._plan()
                if spec is None:
                    if resumed_after is not None and not ran:
                        self._warn_already_finished(resumed_after)
                    self.state = runner.PipelineState.DONE
                    return
                if spec is _IDLE:
                    self._stop.wait(self._settings.batch_interval or 0.05)
                    continue
                started = time.monotonic()
                self._run(spec)
                ran = True
                pause = self._settings.batch_interval - (time.monotonic() - started)
                if pause > 0 and not self._scripts:
                    self._stop.wait(pause)
            self.state = runner.PipelineState.CANCELLED
        except BaseException as exc:  # noqa: BLE001 - reported by the result
            self.error = from_spark_exception(exc) or self._lost(exc) or exc
            self.state = runner.PipelineState.FAILED
        finally:
            self.checkpoint.release()
            if self._temporary:
                self._leave_temporary_checkpoint()

    def _leave_temporary_checkpoint(self) -> None:
        """Deletes a checkpoint of the runner's own making once the job is
        done; after a stop or a failure, keeps it and says how to resume
        from it: only this log knows its name."""
        root = self.checkpoint.root
        if self.state == runner.PipelineState.DONE:
            shutil.rmtree(root, ignore_errors=True)
        else:
            _LOGGER.warning(
                "SparkRunner streaming: the job's checkpoint is kept in %s; "
                "run it again with --checkpoint_dir=%s to resume where it "
                "stopped",
                root,
                root,
            )

    def _lost(self, exc: BaseException) -> BaseException | None:
        """`exc` as a lost driver JVM or a job Spark aborted, if it is one,
        saying which batches are committed and how to resume from them."""
        root = self.checkpoint.root
        resume = (
            f"every batch before {self.position.next_batch} is committed in "
            f"{root}, and a run with --checkpoint_dir={root} resumes after it"
        )
        lost = driver_lost(self._sc, exc, resume) or job_aborted(exc, resume)
        if lost is not None:
            lost.__cause__ = exc
        return lost

    def stop(self) -> None:
        """Asks the loop to stop after the batch it is running commits."""
        self._stop.set()

    def drain(self) -> None:
        """Asks the job to drain from its next batch on: see
        :meth:`_start_draining`."""
        self._drain.set()

    def _start_draining(self) -> None:
        """From this batch on the job runs its drain plan: each splittable
        DoFn's remainders go through the DoFn's ``truncate_restriction``
        once (Beam's default drops an unbounded restriction and keeps a
        bounded one whole), and TestStreams jump to their end, so every
        watermark goes to +inf. The job then fires every event-time timer
        and pane and ends. Only between batches: a batch logged before the
        drain runs as it was logged."""
        before = self._translator.primitives
        self._use_plan(draining=True)
        targets = truncation_targets(before, self._translator.primitives)
        position = self.position
        position.draining = True
        position.remainders = [
            dataclasses.replace(r, stage=targets.get(r.stage, r.stage))
            for r in position.remainders
        ]
        position.pushed = [
            dataclasses.replace(p, stage=targets.get(p.stage, p.stage))
            for p in position.pushed
        ]
        position.source_progress = {
            targets.get(stage, stage): progress
            for stage, progress in position.source_progress.items()
        }
        for name, script in self._scripts.items():
            position.test_streams[name] = max(
                position.test_streams[name], script.end_position
            )
        _LOGGER.info(
            "SparkRunner streaming: draining from batch %d: %d splittable "
            "DoFn remainder(s) go through truncate_restriction",
            position.next_batch,
            sum(r.stage in targets.values() for r in position.remainders),
        )

    def _restore(self) -> int | None:
        """Resumes from the newest committed batch, if any; returns it."""
        last = self.checkpoint.last_commit()
        self.checkpoint.drop_uncommitted_side_inputs(last[0] if last else None)
        if last is None:
            return None
        batch, record = last
        self.position = JobPosition.from_record(record)
        self._check_state_files()
        self._use_plan(draining=self.position.draining)
        self._restore_side_inputs(batch)
        _LOGGER.info(
            "SparkRunner streaming: resuming after committed batch %d from %s",
            batch,
            self.checkpoint.root,
        )
        return batch

    def _restore_side_inputs(self, batch: int) -> None:
        """Reloads what the side inputs held after committed batch
        ``batch``. The windows its watermarks expired go again: a batch's
        file keeps them until it is shrunk after the commit, which a crash
        may have prevented."""
        firings = self.checkpoint.read_side_firings(batch)
        contents = SideContents.restored(
            self.checkpoint.read_side_inputs(batch),
            firings,
            self._translator.windowed_coder,
        )
        contents.expire(self._side_horizons())
        if firings is None and contents.firings():
            # A checkpoint of before firings were stored apart keeps them in
            # its batches' files, which now shrink to their unfired elements.
            self.checkpoint.write_side_firings(batch, contents.firings())
        self._shrink_stored_side_inputs(contents.shrunk())
        self._side_contents = contents
        self._translator.set_side_contents(contents.chunks())

    def _check_state_files(self) -> None:
        """Refuses to resume without a key group's state file: opened anew,
        empty, it would lose the group's state without a word (a window
        counted from nothing, a timer never fired)."""
        for stage, groups in self.position.stored.items():
            folder = self.checkpoint.state_dir(stage_key(stage))
            for group in sorted(groups):
                path = key_group_file(folder, group)
                if not path.exists():
                    raise CheckpointUnusable(
                        f"checkpoint file {path} is missing: it holds state "
                        "of committed batches; restore it, or use a new "
                        "--checkpoint_dir to start afresh"
                    )

    def _warn_already_finished(self, batch: int) -> None:
        # Without a word, a rerun of a finished job on its old directory
        # looks like a job that read nothing.
        _LOGGER.warning(
            "SparkRunner streaming: the job of checkpoint directory %s had "
            "already finished (committed batch %d): nothing was left to run. "
            "Pass a new --checkpoint_dir to run the pipeline again.",
            self.checkpoint.root,
            batch,
        )

    def _run(self, spec: BatchSpec) -> None:
        started = time.monotonic()
        # A crashed attempt of this batch may have left reports behind.
        shutil.rmtree(spec.reports_dir, ignore_errors=True)
        records, metrics = (
            self._translator.run_batch(spec) if _has_work(spec) else ([], None)
        )
        produced = self._fold(spec, records, metrics)
        shrunk = self._keep_side_inputs(spec.batch, produced)
        self.checkpoint.write_commit(spec.batch, self.position.to_record())
        self.checkpoint.prune(spec.batch)
        self._shrink_stored_side_inputs(shrunk)
        shutil.rmtree(spec.reports_dir, ignore_errors=True)
        seconds = time.monotonic() - started
        watermark = _format_micros(
            min(spec.watermarks.pcollections.values(), default=MAX_MICROS)
        )
        oldest_timer = _format_micros(self._oldest_timer())
        _LOGGER.debug(
            "SparkRunner streaming: batch %d committed in %.2f s: %d TestStream "
            "record(s) and %d resumed element(s) in, %d key group(s) woken, "
            "output watermark %s, oldest pending timer %s",
            spec.batch,
            seconds,
            spec.test_stream_records,
            sum(len(r) for r in spec.resumed.values()),
            sum(len(g) for g in spec.due_groups.values()),
            watermark,
            oldest_timer,
        )
        self._progress.committed(spec.batch, seconds, watermark, oldest_timer)

    def _keep_side_inputs(
        self, batch: int, produced: dict[str, list[bytes]]
    ) -> dict[int, dict[str, list[bytes]]]:
        """Adds a batch's side-input elements to what the next batches read,
        drops the windows its watermarks expired, and stores the result
        before the batch's commit: a committed batch's side inputs must
        survive a restart. Returns the earlier batches' stored elements
        that are left, to store once the batch is committed."""
        contents = self._side_contents
        fired = contents.fold(batch, produced, self._translator.windowed_coder)
        expired = contents.expire(self._side_horizons())
        unfired = contents.stored(batch)
        if unfired:
            self.checkpoint.write_side_inputs(batch, unfired)
        if fired or expired:
            self.checkpoint.write_side_firings(batch, contents.firings())
        shrunk = contents.shrunk()
        if produced or expired or shrunk:
            self._translator.set_side_contents(contents.chunks())
        return shrunk

    def _side_horizons(self) -> dict[str, Horizon]:
        """How far the side inputs' windows have expired under the
        watermarks of the last batch run. Every element and event-time
        timer they let through has been processed in it (a task fires
        timers until none is due), and later batches' are no earlier: what
        reads a window after its expiry is a main element later than its
        allowed lateness, or a processing-time timer of an expired window,
        which Beam's runners skip."""
        return self._translator.side_expiry.horizons(
            self.position.watermarks, self._pushed_holds()
        )

    def _shrink_stored_side_inputs(
        self, shrunk: dict[int, dict[str, list[bytes]]]
    ) -> None:
        """Stores what is left of the batches whose windows expired."""
        for batch, kept in shrunk.items():
            self.checkpoint.shrink_side_inputs(batch, kept)

    # -- planning ------------------------------------------------------------

    def _plan(self) -> BatchSpec | object | None:
        position = self.position
        batch = position.next_batch
        logged = self.checkpoint.read_offsets(batch)
        if logged is not None:
            return self._replayed(batch, logged)
        if self._drain.is_set() and not position.draining:
            self._start_draining()
        scripted = bool(self._scripts)
        now = (
            self._script_time(position.test_streams)
            if scripted
            else max(int(time.time() * 1e6), position.processing_time + 1)
        )
        spec = self._spec(batch, now, dict(position.test_streams))
        moved = spec.watermarks.pcollections != position.watermarks
        if _has_work(spec) or moved:
            self._log_offsets(spec, {})
            return spec
        steps = {
            name: script.next_step(position.test_streams[name])
            for name, script in self._scripts.items()
            if not script.done(position.test_streams[name])
        }
        if steps:
            ranges = {name: (s.start, s.end) for name, s in steps.items()}
            return self._scripted(batch, ranges)
        if self._finished(spec):
            return None
        return _IDLE

    def _replayed(self, batch: int, logged: dict) -> BatchSpec:
        _LOGGER.info("SparkRunner streaming: replaying uncommitted batch %d", batch)
        if logged.get("draining") and not self.position.draining:
            self._start_draining()
        ranges = {name: tuple(r) for name, r in logged["test_streams"].items()}
        spec = self._spec(batch, logged["processing_time"], self.position.test_streams)
        self._add_steps(spec, ranges)
        return spec

    def _scripted(self, batch: int, ranges: dict[str, tuple[int, int]]) -> BatchSpec:
        advance = {
            name: self._scripts[name].step(*r).advance_processing_micros
            for name, r in ranges.items()
        }
        now = self._script_time(self.position.test_streams) + max(advance.values())
        spec = self._spec(batch, now, self.position.test_streams)
        self._add_steps(spec, ranges)
        self._log_offsets(spec, ranges)
        return spec

    def _add_steps(self, spec: BatchSpec, ranges: dict) -> None:
        spec.test_stream_ranges = ranges
        for name, (start, end) in ranges.items():
            step = self._scripts[name].step(start, end)
            spec.test_stream_records += step.element_count
            for pc, chunks in step.elements.items():
                spec.elements.setdefault(pc, []).extend(chunks)

    def _log_offsets(self, spec: BatchSpec, ranges: dict) -> None:
        spec.test_stream_ranges = ranges
        self.checkpoint.write_offsets(
            spec.batch,
            {
                "batch": spec.batch,
                "processing_time": spec.processing_time,
                "impulse": spec.impulse,
                "test_streams": {k: list(v) for k, v in ranges.items()},
                "resumed": {k: len(v) for k, v in spec.resumed.items()},
                "watermarks": spec.watermarks.pcollections,
                "draining": self.position.draining,
            },
        )

    def _script_time(self, positions: dict[str, int]) -> int:
        return max(
            self._scripts[name].processing_time(pos) for name, pos in positions.items()
        )

    def _spec(self, batch: int, now: int, positions: dict[str, int]) -> BatchSpec:
        position = self.position
        marks = self._compute_watermarks(positions, now)
        reporting = {r.stage for r in position.remainders if r.ready_at <= now}
        due = {}
        for stage, groups in position.groups.items():
            horizon = event_horizon(marks.inputs[stage])
            woken = sorted(
                g
                for g, s in groups.items()
                if (s.next_event is not None and s.next_event <= horizon)
                or (s.next_processing is not None and s.next_processing <= now)
            )
            if woken:
                due[stage] = woken
        resumed: dict[str, list[bytes]] = {}
        for remainder in position.remainders:
            if remainder.ready_at <= now:
                resumed.setdefault(remainder.stage, []).append(remainder.element)
        for held in self._refed(marks):
            resumed.setdefault(held.stage, []).append(held.element)
        return BatchSpec(
            batch=batch,
            processing_time=now,
            watermarks=marks,
            impulse=not position.impulse_done,
            due_groups=due,
            resumed=resumed,
            reporting=reporting,
            reports_dir=str(self.checkpoint.root / "reports" / str(batch)),
            released=(
                self._compute_watermarks(positions, now, resumed_at=now)
                if reporting
                else None
            ),
        )

    def _refed(self, marks: Watermarks) -> list[PushedBack]:
        """Pushed-back elements to try again: their stage's side inputs'
        watermark has moved since they were pushed back, or a triggered side
        input has new elements (it may now have a pane for their window)."""
        grown = set(self.position.side_grown)
        return [
            held
            for held in self.position.pushed
            if self._side_watermark(held.stage, marks) > held.side_watermark
            or grown.intersection(self._translator.side_inputs.get(held.stage, ()))
        ]

    def _side_watermark(self, stage: str, marks: Watermarks) -> int:
        sides = self._translator.side_inputs.get(stage, ())
        return min((marks.pcollections[pc] for pc in sides), default=MAX_MICROS)

    def _compute_watermarks(
        self, positions: dict[str, int], now: int, resumed_at: int | None = None
    ) -> Watermarks:
        sources = dict.fromkeys(
            self._impulse_outputs,
            MAX_MICROS if self.position.impulse_done else MIN_MICROS,
        )
        for name, script in self._scripts.items():
            sources.update(script.watermarks(positions[name]))
        holds: dict[str, int] = {}
        for stage, groups in self.position.groups.items():
            marks = [s.hold for s in groups.values() if s.hold is not None]
            if marks:
                holds[stage] = min(marks)
        timeout = int(self._settings.idle_timeout * 1e6)
        source_holds = self.position.source_holds(now, timeout, resumed_at)
        for stage, source_hold in source_holds.items():
            holds[stage] = min(holds.get(stage, MAX_MICROS), source_hold)
        for stage, pushed_hold in self._pushed_holds().items():
            holds[stage] = min(holds.get(stage, MAX_MICROS), pushed_hold)
        return self._watermarks.compute(sources, holds)

    def _pushed_holds(self) -> dict[str, int]:
        """Per stage, the earliest timestamp of the elements it pushed back."""
        holds: dict[str, int] = {}
        for held in self.position.pushed:
            holds[held.stage] = min(holds.get(held.stage, MAX_MICROS), held.timestamp)
        return holds

    def _finished(self, spec: BatchSpec) -> bool:
        if self.position.remainders or self.position.pushed:
            return False
        if any(mark < MAX_MICROS for mark in spec.watermarks.pcollections.values()):
            if self._scripts:
                _LOGGER.warning(
                    "SparkRunner streaming: the TestStream has ended but "
                    "watermarks are held below +inf: %s",
                    {k: v for k, v in spec.watermarks.inputs.items() if v < MAX_MICROS},
                )
                return True
            return False
        waiting = self._oldest_timer()
        if waiting is not None:
            _LOGGER.warning(
                "SparkRunner streaming: finished with processing-time timers "
                "still set (the earliest at %s); they will not fire",
                _format_micros(waiting),
            )
        return True

    def _oldest_timer(self) -> int | None:
        times = [
            t
            for groups in self.position.groups.values()
            for s in groups.values()
            for t in (s.next_event, s.next_processing)
            if t is not None
        ]
        return min(times) if times else None

    # -- committing ----------------------------------------------------------

    def _fold(self, spec: BatchSpec, records: list, metrics) -> dict[str, list]:
        """Moves the position past ``spec``; returns the side-input elements
        the batch produced."""
        position = self.position
        for name, (_, end) in spec.test_stream_ranges.items():
            position.test_streams[name] = end
        resumed_at = spec.processing_time
        position.remainders = [
            r for r in position.remainders if r.ready_at > resumed_at
        ]
        refed = {id(held) for held in self._refed(spec.watermarks)}
        position.pushed = [held for held in position.pushed if id(held) not in refed]
        produced: dict[str, list[bytes]] = {}
        for record in records:
            if isinstance(record, SideChunk):
                produced.setdefault(record.pcollection, []).append(record.data)
                continue
            if isinstance(record, PushedBack):
                position.pushed.append(record)
                continue
            if isinstance(record, GroupSummary):
                position.stored.setdefault(record.stage, set()).add(record.group)
                stage = position.groups.setdefault(record.stage, {})
                if _idle(record):
                    stage.pop(record.group, None)
                else:
                    stage[record.group] = record
            elif isinstance(record, Deferred):
                position.remainders.append(
                    Remainder(
                        record.stage,
                        record.element,
                        spec.processing_time + record.delay_micros,
                        record.watermark,
                    )
                )
        if metrics:
            # A new snapshot: result.metrics() may be reading the old one.
            position.metrics = MetricsSnapshot().merge(position.metrics).merge(metrics)
        position.side_grown = sorted(
            pc for pc in produced if pc in self._translator.triggered_side_inputs
        )
        position.track_sources(spec.processing_time)
        position.impulse_done = True
        position.processing_time = spec.processing_time
        position.watermarks = spec.watermarks.pcollections
        position.next_batch = spec.batch + 1
        return produced


_IDLE = object()


def _idle(summary: GroupSummary) -> bool:
    return (
        summary.next_event is None
        and summary.next_processing is None
        and (summary.hold is None or summary.hold >= MAX_MICROS)
    )


def _has_work(spec: BatchSpec) -> bool:
    # Side inputs alone are no work: a stage runs for its main input.
    return bool(spec.impulse or spec.elements or spec.due_groups or spec.resumed)


def _format_micros(micros: int | None) -> str:
    if micros is None:
        return "none"
    if micros >= MAX_MICROS:
        return "+inf"
    if micros <= MIN_MICROS:
        return "-inf"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(micros / 1e6)) + (
        f".{micros % 1_000_000:06d}Z"
    )
