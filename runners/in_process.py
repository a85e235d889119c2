"""Beam's DirectRunner, kept inside this process.

Beam 2.77's `DirectRunner` first tries to run a pipeline on Prism, Beam's Go
runner, whose binary it downloads from GitHub at run time (and caches under
`~/.apache_beam/cache`). Only when that fails does it use its in-process
Python runners: the FnApiRunner for a batch job, the bundle-based runner for
a streaming one or a `TestStream`. So the same command meant two runners:
Prism where GitHub answers, the in-process ones where it does not (this
project's machines and CI). Where it does not, the attempt cost about 70 ms
a run on a quiet machine (a three-element pipeline took 0.22 s instead of
0.15 s), and left a `/tmp/beam-temp*` directory and a worker-pool server's
threads behind (5 threads instead of 1 after six runs).

`InProcessDirectRunner` is the DirectRunner without that attempt: what the
project's tests run on, and what the commands use when `--runner` is absent
or names the DirectRunner. `--runner=PrismRunner` still asks for Prism.
"""

from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner

# For `--runner` and `StandardOptions.DEFAULT_RUNNER`.
IN_PROCESS_DIRECT_RUNNER = "runners.in_process.InProcessDirectRunner"


class InProcessDirectRunner(SwitchingDirectRunner):
    """Beam's `DirectRunner`, choosing only between its in-process runners.

    The DirectRunner skips Prism when an interactive session drives it
    (`is_interactive()`, which `InteractiveRunner` calls), and that is all
    the flag changes: the choice between the FnApiRunner and the
    bundle-based runner is made as before.
    """

    def __init__(self) -> None:
        super().__init__()
        self.is_interactive()
