"""Turn TrainJob objects into what the CLI prints: rows, a detail view, or JSON.

Pure functions over plain dicts, so the layout is tested without a cluster or a terminal.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from raytrain_contract.timefmt import parse_rfc3339

Obj = Mapping[str, Any]

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


def age(obj: Obj, now: dt.datetime | None = None) -> str:
    created = parse_rfc3339(obj.get("metadata", {}).get("creationTimestamp"))
    if created is None:
        return "-"
    now = now or dt.datetime.now(dt.timezone.utc)
    return human_duration((now - created).total_seconds())


def condition(obj: Obj, ctype: str) -> Mapping[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def phase(obj: Obj) -> str:
    return str(obj.get("status", {}).get("phase") or "Pending")


def list_row(obj: Obj, now: dt.datetime | None = None) -> tuple[str, ...]:
    status = obj.get("status", {}) or {}
    trainer = status.get("trainerStatus") or {}
    workers = status.get("workers") or {}
    progress = trainer.get("progressPercentage")
    eta = trainer.get("estimatedRemainingSeconds")
    ready, desired = workers.get("ready"), workers.get("desired")
    return (
        str(obj.get("metadata", {}).get("namespace", "")),
        str(obj.get("metadata", {}).get("name", "")),
        phase(obj),
        f"{progress}%" if progress is not None else "-",
        str(trainer["epoch"]) if trainer.get("epoch") is not None else "-",
        f"{ready or 0}/{desired}" if desired is not None else "-",
        human_duration(eta) if eta is not None and phase(obj) == "Running" else "-",
        age(obj, now),
    )


def detail_lines(obj: Obj, now: dt.datetime | None = None) -> list[str]:
    """A `describe`-style view: what the job is, where it is, and why."""
    meta = obj.get("metadata", {})
    spec = obj.get("spec", {})
    status = obj.get("status", {}) or {}
    trainer = status.get("trainerStatus") or {}
    ckpt = status.get("checkpoint") or {}
    scaling = spec.get("scaling", {})
    storage = spec.get("storage", {})
    if "s3" in storage:
        where = storage["s3"].get("uri", "")
    elif "pvc" in storage:
        where = f"pvc/{storage['pvc'].get('claimName')}"
    else:
        where = "-"
    workers = (
        scaling.get("numWorkers") or f"{scaling.get('minWorkers')}-{scaling.get('maxWorkers')}"
    )
    lines = [
        f"Name:        {meta.get('namespace', '')}/{meta.get('name', '')}",
        f"Status:      {phase(obj)}",
        f"Entrypoint:  {spec.get('entrypoint', '-')}",
        f"Image:       {spec.get('image', '-')}",
        f"Workers:     {workers} (gpu: {bool(scaling.get('useGpu'))})",
        f"Storage:     {where}",
        f"Run name:    {status.get('runName', '-')}",
        f"RayJob:      {status.get('rayJobName', '-')}  attempt {status.get('attempt', 0)}, "
        f"restarts {status.get('restarts', 0)}",
        f"Dashboard:   {status.get('dashboardURL', '-')}",
    ]
    if trainer:
        progress = trainer.get("progressPercentage")
        lines.append(
            f"Progress:    {progress if progress is not None else '-'}%  epoch "
            f"{trainer.get('epoch', '-')}  ETA "
            f"{human_duration(trainer.get('estimatedRemainingSeconds'))}"
        )
        metrics = ", ".join(f"{m['name']}={m['value']}" for m in trainer.get("metrics") or [])
        if metrics:
            lines.append(f"Metrics:     {metrics}")
        if trainer.get("message"):
            lines.append(f"Trainer:     {trainer['message']}")
    if ckpt:
        lines.append(f"Checkpoint:  latest {ckpt.get('latestURI', '-')}")
        if ckpt.get("bestURI"):
            lines.append(f"             best {ckpt['bestURI']} ({ckpt.get('bestMetric', '-')})")
    conditions: Sequence[Mapping[str, Any]] = status.get("conditions") or []
    if conditions:
        lines.append("Conditions:")
        for cond in conditions:
            lines.append(
                f"  {cond.get('type', ''):<12} {cond.get('status', ''):<6} "
                f"{cond.get('reason', ''):<24} {cond.get('message', '')}"
            )
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
