"""Turn TrainJobs into what the CLI prints: rows, a detail view, or JSON.

Pure functions over the SDK's models (raytrain.models), which read a job's spec as it runs
(its template's values filled in), so the layout is tested without a cluster or a terminal.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from raytrain.models import TrainJob

LIST_COLUMNS = ("NAMESPACE", "NAME", "STATUS", "PROGRESS", "EPOCH", "WORKERS", "ETA", "AGE")


def human_duration(seconds: float | None) -> str:
    """`75` → `1m15s`, like kubectl's ages."""
    if seconds is None or seconds < 0:
        return "-"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs and minutes < 10 else f"{minutes}m"
    return f"{secs}s"


def age(job: TrainJob, now: dt.datetime | None = None) -> str:
    if job.creation_timestamp is None:
        return "-"
    now = now or dt.datetime.now(dt.timezone.utc)
    return human_duration((now - job.creation_timestamp).total_seconds())


def list_row(job: TrainJob, now: dt.datetime | None = None) -> tuple[str, ...]:
    desired, ready = job.workers_desired, job.workers_ready
    eta = job.estimated_remaining_seconds
    return (
        job.namespace,
        job.name,
        job.phase,
        f"{job.progress}%" if job.progress is not None else "-",
        str(job.epoch) if job.epoch is not None else "-",
        f"{ready or 0}/{desired}" if desired is not None else "-",
        human_duration(eta) if eta is not None and job.phase == "Running" else "-",
        age(job, now),
    )


def workers(job: TrainJob) -> str:
    """`2`, or `2-4` for an elastic job."""
    if job.num_workers is not None:
        return str(job.num_workers)
    if job.min_workers is None and job.max_workers is None:
        return "-"
    return f"{_or_dash(job.min_workers)}-{_or_dash(job.max_workers)}"


def code_line(job: TrainJob) -> str:
    """spec.code as `get` shows it: the snapshot's hash and where it is, or the image's code."""
    if not job.code_uri:
        return "from the image"
    return f"sha256:{(job.code_sha256 or '?')[:12]}  {job.code_uri}"


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def detail_lines(job: TrainJob, now: dt.datetime | None = None) -> list[str]:
    """A `describe`-style view: what the job is, where it is, and why. Spec fields are those the
    job runs with: a field it leaves to its template shows the template's value."""
    lines = [
        f"Name:        {job.namespace}/{job.name}",
        f"Status:      {job.phase}",
        f"Entrypoint:  {_or_dash(job.entrypoint)}",
        f"Image:       {_or_dash(job.image)}",
        f"Code:        {code_line(job)}",
        f"Workers:     {workers(job)} (gpu: {job.use_gpu})",
        f"Storage:     {_or_dash(job.checkpoints.storage)}",
        f"Run name:    {_or_dash(job.run_name)}",
        f"RayJob:      {_or_dash(job.ray_job_name)}  attempt {job.attempt}, "
        f"restarts {job.restarts}",
        f"Dashboard:   {_or_dash(job.dashboard_url)}",
    ]
    if job.progress is not None or job.epoch is not None or job.metrics or job.message:
        lines.append(
            f"Progress:    {_or_dash(job.progress)}%  epoch {_or_dash(job.epoch)}  ETA "
            f"{human_duration(job.estimated_remaining_seconds)}"
        )
        metrics = ", ".join(f"{name}={value}" for name, value in job.metrics.items())
        if metrics:
            lines.append(f"Metrics:     {metrics}")
        if job.message:
            lines.append(f"Trainer:     {job.message}")
    ckpt = job.checkpoints
    if ckpt.latest_uri or ckpt.best_uri or ckpt.count is not None:
        lines.append(f"Checkpoint:  latest {_or_dash(ckpt.latest_uri)}")
        if ckpt.best_uri:
            lines.append(f"             best {ckpt.best_uri} ({_or_dash(ckpt.best_metric)})")
    if job.conditions:
        lines.append("Conditions:")
        for cond in job.conditions:
            lines.append(f"  {cond.type:<12} {cond.status:<6} {cond.reason:<24} {cond.message}")
    return lines


def columns(rows: Sequence[Sequence[str]], gap: int = 3) -> list[str]:
    """Rows as aligned text, like kubectl's tables: no cell is ever cut, wrapped or elided (the
    line grows instead), and the last column is not padded, so it can hold a long message."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        (" " * gap).join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    ]
