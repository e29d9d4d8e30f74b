"""Step-progress watchdog.

A rank stuck in a collective (a peer hung, a NIC died) blocks forever inside C++ code, where
no Python exception can reach it. A daemon thread that sees no progress for `timeout_s` logs
the fixed watchdog line and calls os._exit, which ends the process without waiting for the
stuck main thread; the non-zero exit makes the operator restart the job.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from training.metrics import watchdog_line

WATCHDOG_EXIT_CODE = 3


class Watchdog:
    def __init__(self, timeout_s: float, poll_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self.poll_s = poll_s if poll_s is not None else max(min(timeout_s / 10.0, 5.0), 0.05)
        self._last = time.monotonic()
        self._step = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.timeout_s <= 0 or self._thread is not None:
            return
        self.beat(self._step)
        self._thread = threading.Thread(target=self._run, name="hptrain-watchdog", daemon=True)
        self._thread.start()

    def beat(self, step: int) -> None:
        with self._lock:
            self._last = time.monotonic()
            self._step = step

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            with self._lock:
                idle = time.monotonic() - self._last
                step = self._step
            if idle >= self.timeout_s:
                sys.stdout.write(watchdog_line(idle, step) + "\n")
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(WATCHDOG_EXIT_CODE)
