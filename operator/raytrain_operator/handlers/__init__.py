"""kopf handlers: thin I/O shells around the pure builders and the status state machine.

Importing this package registers every handler (`kopf run -m raytrain_operator.handlers`).
"""

from __future__ import annotations

from typing import Any

import kopf

from raytrain_operator.handlers import legacy, rayjobs, trainjobs, wake
from raytrain_operator.settings import CONFIG, configure_kopf

__all__ = ["legacy", "rayjobs", "trainjobs", "wake"]


@kopf.on.startup(id="configure")
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    configure_kopf(settings, CONFIG)
