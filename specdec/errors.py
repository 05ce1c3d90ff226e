"""One root exception for everything specdec reports to a user.

Subclasses say which input was wrong; the CLI turns any of them into a clean
``click.ClickException`` in one place (``specdec.cli``).
"""

from __future__ import annotations

from pathlib import Path


class SpecdecError(Exception):
    """A problem the user can act on; the message says what and where."""

    #: The run folder that was being recorded when it was raised, set by
    #: ``replay.writing`` so that the CLI can still say what was recorded.
    run_dir: Path | None = None


class InputFileError(SpecdecError):
    """A malformed input file. The message names the file, row and field."""

    def __init__(self, path: object, problem: str, *, row: int | None = None, field: str | None = None):
        where = str(path)
        if row is not None:
            where += f", row {row}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {problem}")
        self.path, self.row, self.field = path, row, field


class EngineError(SpecdecError):
    """The inference server could not be started or reached."""
