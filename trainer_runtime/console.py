"""The console transport: the same status reports, shown in the terminal with ``rich``.

Used in local mode and when ``report.enabled`` is false. Each patch updates a progress bar and
prints one line per new epoch or checkpoint, so a person sees the run as the TrainJob would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn


class ConsoleTransport:
    def __init__(self, title: str, *, console: Console | None = None, live: bool = True) -> None:
        self.console = console or Console(stderr=True)
        self.title = title
        self._progress: Progress | None = None
        self._task: Any = None
        self._live = live
        self._last_step: int | None = None
        self._last_checkpoint: str | None = None
        self._last_hang: str | None = None

    def _bar(self) -> Progress:
        if self._progress is None:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeRemainingColumn(),
                console=self.console,
                disable=not self._live,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.title, total=100)
        return self._progress

    def patch_status(self, body: dict[str, Any]) -> None:
        status = body.get("status", {})
        trainer = status.get("trainerStatus", {})
        ckpt = status.get("checkpoint") or {}
        bar = self._bar()
        if trainer.get("progressPercentage") is not None:
            bar.update(self._task, completed=trainer["progressPercentage"])
        metrics = "  ".join(f"{m['name']}={m['value']}" for m in trainer.get("metrics", []))
        step = trainer.get("step")
        if step != self._last_step and metrics:
            self._last_step = step
            eta = trainer.get("estimatedRemainingSeconds")
            eta_text = f"  eta {eta}s" if eta is not None else ""
            self.console.print(f"[cyan]report {step}[/]  {escape(metrics)}{eta_text}")
        latest = ckpt.get("latestURI")
        if latest and latest != self._last_checkpoint:
            self._last_checkpoint = latest
            self.console.print(f"[green]checkpoint {ckpt.get('count')}[/]  {escape(latest)}")
        hang = trainer.get("hang")
        if isinstance(hang, Mapping) and hang.get("since") != self._last_hang:
            self._last_hang = str(hang.get("since"))
            groups = "; ".join(
                f"ranks {g.get('ranks')} {g.get('where')}" for g in hang.get("groups") or []
            )
            self.console.print(
                f"[bold red]no report for {hang.get('timeoutSeconds')} s[/]  {escape(groups)}"
                + (f"  stacks: {escape(str(hang['stacks']))}" if hang.get("stacks") else "")
            )
        phase = trainer.get("phase")
        if phase in ("Succeeded", "Failed"):
            if phase == "Succeeded":
                bar.update(self._task, completed=100)
            bar.stop()
            style = "bold green" if phase == "Succeeded" else "bold red"
            self.console.print(f"[{style}]{phase}[/] {escape(str(trainer.get('message', '')))}")

    def read_trainjob(self) -> Mapping[str, Any] | None:
        return None
