"""Late-data policy: what a computation does with records behind its watermark.

MillWheel leaves it to the computation: a record older than the low watermark
can be dropped or folded into the state it would have updated. Here a record
is *late* once the window it belongs to has been emitted, i.e. the watermark
has passed the window's end. Two policies:

- ``drop``: late records go to a ``late`` output, counted, and change nothing.
- ``correct``: a late record within ``allowed_lateness`` of the watermark
  updates its window, which is re-emitted with a higher revision; beyond the
  allowed lateness it goes to the ``late`` output like ``drop``.
"""

import dataclasses
import enum


class LatePolicy(enum.Enum):
    DROP = "drop"
    CORRECT = "correct"


class Lateness(enum.Enum):
    """Where a record stands relative to the windows already emitted."""

    ON_TIME = "on_time"
    CORRECTABLE = "correctable"
    TOO_LATE = "too_late"


@dataclasses.dataclass(frozen=True)
class LateDataPolicy:
    """A late-data policy and its allowed lateness, in milliseconds."""

    policy: LatePolicy = LatePolicy.DROP
    allowed_lateness_ms: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.policy, LatePolicy):
            object.__setattr__(self, "policy", parse_policy(self.policy))
        if self.allowed_lateness_ms < 0:
            raise ValueError(
                f"allowed_lateness must be >= 0, got {self.allowed_lateness_ms} ms"
            )

    def classify(
        self, window_end_ms: int, emitted_through_ms: int | None, watermark_ms: int
    ) -> Lateness:
        """Classify a record of the window ending at `window_end_ms`.

        `emitted_through_ms` is the end of the last window already emitted for
        the record's key, or None when nothing has been; `watermark_ms` is the
        key's view of the low watermark (its latest timer firing), which may
        run ahead of the emissions once the key has gone quiet.
        """
        if emitted_through_ms is None or window_end_ms > emitted_through_ms:
            return Lateness.ON_TIME
        if (
            self.policy is LatePolicy.CORRECT
            and window_end_ms + self.allowed_lateness_ms > watermark_ms
        ):
            return Lateness.CORRECTABLE
        return Lateness.TOO_LATE

    def retains(self, window_end_ms: int, watermark_ms: int) -> bool:
        """Whether an emitted window must be kept to apply future corrections."""
        return (
            self.policy is LatePolicy.CORRECT
            and window_end_ms + self.allowed_lateness_ms > watermark_ms
        )


def parse_policy(name: str) -> LatePolicy:
    """The policy named `name` ("drop" or "correct"), with a clear error."""
    try:
        return LatePolicy(str(name).lower())
    except ValueError:
        choices = ", ".join(p.value for p in LatePolicy)
        raise ValueError(
            f"unknown late-data policy {name!r}; expected one of: {choices}"
        ) from None
