"""A rich progress bar on stderr, one task per transferred file (quiet when disabled)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from iadeep.datasets._download import Reporter

__all__ = ["progress_bar"]

NewTask = Callable[[str, int], Reporter]


class _Task:
    def __init__(self, progress: Progress, task_id: TaskID) -> None:
        self._progress = progress
        self._task_id = task_id

    def reset(self, completed: int) -> None:
        self._progress.update(self._task_id, completed=completed)

    def advance(self, nbytes: int) -> None:
        self._progress.advance(self._task_id, nbytes)


@contextmanager
def progress_bar(enabled: bool) -> Iterator[NewTask]:
    """Yield a factory ``(label, total_bytes) -> Reporter`` drawing one bar per file.

    Nothing is drawn (not even a blank line) until the first task is created.
    """
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )

    def new_task(label: str, total: int) -> Reporter:
        if not progress.live.is_started:
            progress.start()
        return _Task(progress, progress.add_task(label, total=total))

    try:
        yield new_task
    finally:
        if progress.live.is_started:
            progress.stop()
