"""What passes share besides the queue: the settings, the thread pool for a pass's side-by-side
requests, the parsed specs, and when pods may next be listed after a 403.

One `PassState` is built with the engine at start-up (handlers/engine.py) and handed to every
pass; a test builds its own. Nothing here is a module global.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from raytrain_operator.settings import OperatorConfig

#: After a 403 on listing pods, how long before trying again.
PODS_FORBIDDEN_RETRY_SECONDS = 600.0
#: parse() results kept at most (then the cache starts again).
PARSED_MAX = 8192


@dataclass
class PassState:
    config: OperatorConfig = field(default_factory=OperatorConfig)
    #: parse() results by (uid, generation, labels, annotations, template version).
    parsed: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    pods_forbidden_until: float = 0.0
    #: Builder bugs whose traceback was logged: (uid, exception type, message).
    faults: set[tuple[Any, ...]] = field(default_factory=set)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)

    def pool(self) -> ThreadPoolExecutor:
        """Threads that carry a pass's requests that go out beside its own (each keeps its own
        connection to the API server): as many as the queue runs passes at once, so that
        passes never wait for one another's requests here."""
        with self._guard:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.config.workers, thread_name_prefix="raytrain-apply"
                )
            return self._pool

    def parsed_get(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        with self._guard:
            found = self.parsed.get(key)
        if found is not None:
            return found
        result = build()
        with self._guard:
            if len(self.parsed) >= PARSED_MAX:
                self.parsed.clear()
            self.parsed[key] = result
        return result

    def first_fault(self, key: tuple[Any, ...]) -> bool:
        """True the first time a builder bug `key` (uid, type, message) is met, so its
        traceback is logged once."""
        with self._guard:
            if key in self.faults:
                return False
            if len(self.faults) >= PARSED_MAX:
                self.faults.clear()
            self.faults.add(key)
            return True

    def forget(self, uid: str) -> None:
        """Drop a deleted TrainJob's parsed specs and logged faults."""
        with self._guard:
            for key in [k for k in self.parsed if k[0] == uid]:
                self.parsed.pop(key, None)
            self.faults = {k for k in self.faults if k[0] != uid}

    def may_list_pods(self) -> bool:
        return time.monotonic() >= self.pods_forbidden_until

    def pods_forbidden(self) -> None:
        # No permission to list pods (it is optional): ask again only now and then.
        self.pods_forbidden_until = time.monotonic() + PODS_FORBIDDEN_RETRY_SECONDS

    def shutdown(self) -> None:
        with self._guard:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
