"""Busy competitor processes for the benches' ``--contention N`` mode.

A phone or a shared server is never quiet: some other process wants a core while a step
runs. ``Competitors(n)`` starts n processes that spin in a Python loop (one core each, no
memory traffic to speak of) and stops them on leaving the ``with`` block, each by its own
process id, so nothing else on the machine is touched and nothing outlives the bench (they
are killed on an exception too, and they die with the bench's process group on Ctrl-C).

    with Competitors(1):
        measure()  # the step time next to one busy process
"""

from __future__ import annotations

import subprocess
import sys
import time

SPIN = "while True: pass"


class Competitors:
    def __init__(self, count: int) -> None:
        if count < 0:
            raise ValueError(f"competitor count must be >= 0, got {count}")
        self.count = count
        self.processes: list[subprocess.Popen] = []

    def __enter__(self) -> Competitors:
        try:
            for _ in range(self.count):
                self.processes.append(subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL))
            if self.processes:
                time.sleep(0.3)  # started and spinning before the measurement starts
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.wait()
        self.processes.clear()
