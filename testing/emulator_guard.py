"""Runs a command for as long as the process that started it lives.

``python emulator_guard.py ARGV...``, started in a session of its own, runs
ARGV in its process group and reads its standard input, a pipe whose other
end only the launching process holds. When that end closes (the launcher
exited, however it died, SIGKILL included), the guard stops the command,
and the process group the command may have made for itself. Without it, a
Bigtable emulator launched by a Photon command that was SIGKILLed went on
running, holding its port and memory, since it runs in a session of its own
(so that a Ctrl-C meant for the pipeline does not stop it first).

The guard exits with the command's exit code when the command ends first.
It is a separate process, not ``PR_SET_PDEATHSIG`` in the child, because that
needs code between fork and exec, which is unsafe in a launcher with threads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

# How long the command gets to stop on SIGTERM before SIGKILL.
_GRACE_SECONDS = 5.0


class GuardedCommand:
    """The command and the process group it ends up in: gcloud's wrapper
    moves itself and the emulator it starts into a group of their own, which
    a signal to the guard's group would miss."""

    def __init__(self, argv: list[str]) -> None:
        # Started in the guard's group: one signal to it reaches both, unless
        # the command leaves it.
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        self._own_group: int | None = None

    def signal_own_group(self, signum: int) -> None:
        """Sends `signum` to the group the command made for itself, if any."""
        if self._own_group is None:
            try:
                group = os.getpgid(self.process.pid)
            except ProcessLookupError:
                return
            if group == os.getpgrp():
                return
            self._own_group = group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._own_group, signum)


def _stop_when_launcher_exits(command: GuardedCommand) -> None:
    # Blocks until the launcher's end of the pipe closes: EOF.
    while sys.stdin.buffer.read(65536):
        pass
    # The guard's handler passes it on to the command's own group.
    os.killpg(os.getpgrp(), signal.SIGTERM)
    try:
        command.process.wait(_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        command.signal_own_group(signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    command = GuardedCommand(argv)
    # A SIGTERM to the guard's group (the launcher's stop, or the guard's own
    # when the launcher is gone) is for the command: the guard passes it on
    # and outlives the command to report its exit code.
    signal.signal(
        signal.SIGTERM, lambda signum, frame: command.signal_own_group(signum)
    )
    threading.Thread(
        target=_stop_when_launcher_exits, args=(command,), daemon=True
    ).start()
    code = command.process.wait()
    # The emulator under gcloud's wrapper can outlive the wrapper.
    command.signal_own_group(signal.SIGKILL)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
