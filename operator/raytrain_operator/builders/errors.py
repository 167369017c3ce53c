"""The error a builder raises on purpose for a spec it cannot turn into children.

`SpecError` is the user's problem: its message names the field and says how to fix it, and the
TrainJob stalls with reason `InvalidSpec`. Any other exception out of a builder is a bug in the
operator (handlers/faults.py reports it as such). It subclasses ValueError, so code that caught
the builders' ValueError before still catches it.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A spec the builders refuse: the message names the field and the fix."""
