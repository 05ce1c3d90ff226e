"""Progress display for long replays (rich), or quiet log lines when disabled
or when the output is not a terminal."""

from __future__ import annotations

import sys

from specdec.replay.client import StreamResult


class Progress:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled and sys.stderr.isatty()
        self.quiet_lines = enabled and not self.enabled
        self._bar = None
        self._errors = 0
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"), TimeElapsedColumn(), transient=False,
            )

    def __enter__(self) -> "Progress":
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        elif self.quiet_lines:
            print(text, file=sys.stderr, flush=True)

    def start_level(self, arm: str, level: int, total: int):
        self._errors = 0
        if self._bar is not None:
            return self._bar.add_task(f"{arm:<11} c={level:<3}", total=total, status="")
        self.message(f"{arm} concurrency {level}: {total} requests")
        return None

    def advance(self, task, res: StreamResult) -> None:
        if not res.success:
            self._errors += 1
        if self._bar is not None:
            status = f"[red]{self._errors} errors" if self._errors else ""
            self._bar.update(task, advance=1, status=status)

    def end_level(self, task) -> None:
        if self._bar is None and self._errors:
            self.message(f"  {self._errors} failed requests")
