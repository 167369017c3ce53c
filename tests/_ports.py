"""A free TCP port on loopback, for a server a test or benchmark starts (MinIO, the operator's
metrics and health endpoints). The kernel picks it; the socket closes before the caller binds,
which is safe on a machine where nothing else grabs ports in that instant."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
