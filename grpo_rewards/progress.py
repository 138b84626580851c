"""The command lines' progress bar over a count of items (scoring, generating): one look for both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console


@contextmanager
def counting_bar(label: str, total: int, enabled: bool, console: Console | None = None
                 ) -> Iterator[Callable[[int], None]]:
    """A bar `label ━━ done/total time-left` on `console` (stderr by default), or nothing when not
    `enabled`; yields `advance(n)`."""
    if not enabled:
        yield lambda n: None
        return
    # rich.progress only when a bar is shown: every command would otherwise import it at its start.
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console or Console(stderr=True)) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
