"""Progress display for long replays: rich progress bars on a terminal, or
plain log lines (``--no-progress``, or output that is not a terminal): one
line when a level starts and one when it ends, with its failures."""

from __future__ import annotations

import sys
import time

from specdec.replay.http.client import StreamResult


class Progress:
    def __init__(self, enabled: bool = True, stream=None):
        self.stream = stream or sys.stderr
        self.bars = enabled and getattr(self.stream, "isatty", lambda: False)()
        self._bar = None
        self._errors = 0
        self._done = 0
        self._level: tuple[str, int, float] | None = None  # name, total, monotonic start
        if self.bars:
            from rich.console import Console  # heavy: rich, imported only when used
            from rich.progress import (  # heavy: rich, imported only when used
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as RichProgress  # heavy: rich, imported only when used

            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                transient=False,
                console=Console(file=self.stream),
            )

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def start_level(self, arm: str, level: int, total: int, repeat: int | None = None):
        self._errors = self._done = 0
        name = f"{arm} c={level}" + (f" r={repeat}" if repeat is not None else "")
        self._level = (name, total, time.monotonic())
        if self._bar is not None:
            return self._bar.add_task(f"{name:<19}", total=total, status="")
        self.message(f"{name}: {total} requests ...")
        return None

    def advance(self, task, res: StreamResult) -> None:
        self._done += 1
        if not res.success:
            self._errors += 1
        if self._bar is not None:
            status = f"[red]{self._errors} failed" if self._errors else ""
            self._bar.update(task, advance=1, status=status)

    def end_level(self, task) -> None:
        if self._bar is not None or self._level is None:
            return
        name, total, t0 = self._level
        failed = f", {self._errors} FAILED" if self._errors else ", 0 failed"
        self.message(f"{name}: {self._done}/{total} done{failed} in {time.monotonic() - t0:.1f} s")
