"""The console rendering of the event stream: live lines per host, a summary table."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol

from rich.console import Console
from rich.table import Table

from rollout.output.escape import console_text, control_escaped
from rollout.output.events import Event
from rollout.output.progress import PlainLines, format_progress
from rollout.secrets import redact

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class OutcomeRow(Protocol):
    """One host's line of the summary table (the engine's HostOutcome)."""

    @property
    def host(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def release(self) -> str | None: ...
    @property
    def reason(self) -> str: ...


class Summary(Protocol):
    """What the summary table shows of a run (the engine's RunSummary): output sits below the
    engine and reads its results through this shape."""

    @property
    def run_id(self) -> str: ...
    @property
    def outcomes(self) -> Mapping[str, OutcomeRow]: ...
    @property
    def aborted(self) -> str | None: ...

_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "skipped": "cyan",
    "failed": "bold red",
    "validated": "bold green",
    "rolled_back": "bold yellow",
    "unreachable": "bold red",
    "locked": "bold red",
    "not_started": "dim",
}


BUILD_PLAIN_INTERVAL = 4.0  # seconds: off a terminal, a build's line this often (its heartbeat
# events come every 5 s at most: each prints)
PLAIN_WIDTH = 100_000  # without a terminal: one full line per event, never wrapped


def make_console(file: IO[str] | None = None, stderr: bool = True) -> Console:
    """A console for a terminal (colour, its width) or, without one, plain full lines; no
    colour at all under NO_COLOR (https://no-color.org)."""
    stream = file or (sys.stderr if stderr else sys.stdout)
    terminal = stream.isatty()
    no_color = bool(os.environ.get("NO_COLOR"))
    return Console(
        file=stream,
        highlight=False,
        soft_wrap=not terminal,
        width=None if terminal else PLAIN_WIDTH,
        color_system=None if no_color else "auto",
        no_color=no_color,
    )


def styled(status: str, text: str | None = None) -> str:
    """`text` (default: the status) in the status's colour, escaped (output.escape): host
    output is neither markup nor control characters."""
    shown = console_text(text if text is not None else status)
    return f"[{_STYLE.get(status, 'default')}]{shown}[/]"


class ConsoleSink:
    """Prints one line per step end, retry and host end, prefixed with the host; `quiet`:
    only failed steps and hosts that did not end validated."""

    def __init__(
        self, console: Console | None = None, verbose: bool = False, quiet: bool = False
    ) -> None:
        self.console = console or make_console()
        self.verbose = verbose and not quiet
        self.quiet = quiet
        self.plain = PlainLines()
        self.build_plain = PlainLines(BUILD_PLAIN_INTERVAL, step=1)  # at each step, and often
        self._live: Progress | None = None
        self._tasks: dict[tuple[str, str], TaskID] = {}

    def __call__(self, event: Event) -> None:
        if self.quiet and not _is_failure(event):
            return
        if event.kind == "progress":
            return self._progress(event)
        if event.kind == "build_progress":
            return self._build_progress(event)
        if event.kind in ("step_end", "host_end"):
            self._end_live(event.host or "controller")
            self.plain.forget(event.host or "controller")
        line = self._line(event)
        if line:
            self.console.print(line)

    def _progress(self, e: Event) -> None:
        """A terminal: a live line per host and transfer; else a whole line now and then."""
        key = (e.host or "controller", str(e.data.get("what", "")))
        text = (f"[bold]{console_text(key[0]):<12}[/bold] {console_text(e.step or ''):<10} "
                f"{console_text(format_progress(e.data))}")
        done, total = e.data.get("bytes"), e.data.get("total")
        sized = isinstance(done, int) and isinstance(total, int) and total > 0
        percent = 100.0 * done / total if sized else 100.0  # type: ignore[operator]
        finished = percent >= 100.0
        if not self.console.is_terminal:
            if self.plain.due(key, e.time, percent, finished):
                self.console.print(text)
            return
        self._live_update(key, text, done, total, finished)

    def _build_progress(self, e: Event) -> None:
        """The build's step and last line: a live line on a terminal, else a whole line at
        each step and every BUILD_PLAIN_INTERVAL seconds while it runs."""
        key = (e.host or "controller", "build")
        text = (f"[bold]{console_text(key[0]):<12}[/bold] {console_text(e.step or ''):<10} "
                f"{console_text(format_build(e.data))}")
        number, count = _count(e.data.get("step_number")), _count(e.data.get("step_count"))
        if not self.console.is_terminal:
            if self.build_plain.due(key, e.time, float(number), False):
                self.console.print(text)
            return
        self._live_update(key, text, number, count or None, False)

    def _live_update(self, key: tuple[str, str], text: str, done: object, total: object,
                     finished: bool) -> None:
        if self._live is None:
            from rich.progress import BarColumn, Progress, TextColumn  # a terminal's bars only

            self._live = Progress(TextColumn("{task.description}"), BarColumn(),
                                  console=self.console, transient=True)
            self._live.start()
        task = self._tasks.get(key)
        completed = done if isinstance(done, int) else 0
        size = total if isinstance(total, int) else None
        if task is None:
            self._tasks[key] = self._live.add_task(text, total=size, completed=completed)
        else:
            self._live.update(task, description=text, total=size, completed=completed)
        if finished:
            self._drop_task(key)

    def _end_live(self, host: str) -> None:
        for key in [k for k in self._tasks if k[0] == host]:
            self._drop_task(key)

    def _drop_task(self, key: tuple[str, str]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None and self._live is not None:
            self._live.remove_task(task)
        if not self._tasks and self._live is not None:
            self._live.stop()
            self._live = None

    def _line(self, e: Event) -> str | None:
        who = f"[bold]{console_text(e.host or 'controller'):<12}[/bold]"
        if e.kind == "step_end":
            secs = e.data.get("duration", 0)
            status = e.status or ""
            reason = console_text(e.reason or "")
            line = f"{who} {e.step:<10} {styled(status, f'{status:<8}')} {reason} ({secs:.1f}s)"
            return "\n".join([line, *_last_lines(e)])
        if e.kind == "build_output" and self.verbose:
            line = console_text(e.data.get("line", ""))
            return f"{who} {console_text(e.step or ''):<10} | {line}"
        if e.kind == "step_start" and self.verbose:
            return f"{who} {e.step:<10} ..."
        if e.kind == "retry":
            return (
                f"{who} {e.step:<10} [yellow]retry[/yellow]    attempt {e.data['attempt']}: "
                f"{console_text(e.reason or '')}"
            )
        if e.kind == "batch_start":
            hosts = console_text(", ".join(map(str, e.data["hosts"])))
            return f"[bold]--- batch {e.data['index'] + 1}: {hosts}[/bold]"
        if e.kind == "host_end":
            status = e.status or ""
            return f"{who} {styled(status, status.upper())} {console_text(e.reason or '')}"
        if e.kind in ("note", "lock_broken", "connecting", "work"):
            return f"{who} {console_text(e.reason or '')}"
        if e.kind == "guard_report":  # what a host's guard did, read from the host
            status = "validated" if e.status == "validated" else "failed"
            return f"{who} {styled(status, 'guard')}      {console_text(e.reason or '')}"
        if e.kind == "fallback":
            return f"{who} [yellow]fallback[/yellow]   {console_text(e.reason or '')}"
        if e.kind == "warning":
            return f"{who} [bold yellow]{console_text(e.reason or '')}[/]"
        return None


def format_build(data: Mapping[str, Any]) -> str:
    """`step 2/5 RUN make (41 s, build 63 s): cc -c foo.c` from a build_progress event."""
    number, count = _count(data.get("step_number")), _count(data.get("step_count"))
    elapsed, step_elapsed = _count(data.get("elapsed")), _count(data.get("step_elapsed"))
    if not number:
        return f"sending the context to Docker ({elapsed} s)"
    text = (f"step {number}/{count} {data.get('instruction', '')} "
            f"({step_elapsed} s, build {elapsed} s)")
    line = data.get("line")
    return f"{text}: {line}" if line else text


def _count(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _last_lines(e: Event) -> list[str]:
    """A failed step's last lines of output (a failed build's), each escaped and indented."""
    lines = e.data.get("last_lines") if e.status == "failed" else None
    if not isinstance(lines, list) or not lines:
        return []
    return [f"  [dim]{console_text(e.step or '')} output (last {len(lines)} lines):[/dim]",
            *(f"  | {console_text(line)}" for line in lines)]


def _is_failure(e: Event) -> bool:
    if e.kind == "step_end":
        return e.status == "failed"
    return e.kind in ("host_end", "guard_report") and e.status != "validated"


SUMMARY_COLUMNS = ["host", "result", "release", "reason"]


def summary_rows(summary: Summary) -> list[dict[str, Any]]:
    return [{"host": o.host, "result": o.status, "release": o.release or "-",
             "reason": redact(o.reason)} for o in summary.outcomes.values()]


def summary_table(summary: Summary, command: str = "rollout") -> Table:
    table = Table(title=f"{command} {summary.run_id}")
    for column in SUMMARY_COLUMNS:
        table.add_column(column)
    for row in summary_rows(summary):
        table.add_row(*(styled(row["result"]) if c == "result" else console_text(row[c])
                        for c in SUMMARY_COLUMNS))
    return table


def print_summary(summary: Summary, console: Console | None = None,
                  command: str = "rollout") -> None:
    """The result table, titled by the command that ran (rollout, rollback)."""
    console = console or make_console()
    if console.is_terminal:
        console.print(summary_table(summary, command))
    else:
        console.file.write(plain_table(summary_rows(summary), SUMMARY_COLUMNS,
                                       f"{command} {summary.run_id}"))
    if summary.aborted:
        console.print(f"[bold red]aborted:[/bold red] {console_text(summary.aborted)}")


def plain_table(rows: list[dict[str, Any]], columns: list[str], title: str = "") -> str:
    """A table for a file or a pipe: the title, then columns aligned with two spaces, no
    box drawing and no padding after the last column; every cell escaped."""
    cells = [columns] + [[control_escaped(row.get(c, "-")) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
             for line in cells]
    return "".join(f"{line}\n" for line in ([control_escaped(title)] if title else []) + lines)


def print_table(rows: list[dict[str, Any]], columns: list[str], title: str = "") -> None:
    console = make_console(stderr=False)
    if not console.is_terminal:
        console.file.write(plain_table(rows, columns, title))
        return
    table = Table(title=title or None)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(console_text(str(row.get(c, "-"))) for c in columns))
    console.print(table)
