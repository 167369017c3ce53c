"""Kubernetes resource quantities: parse, multiply, and convert to Ray's units.

Ray counts CPUs as floats and memory in bytes; Kubernetes writes `500m` and `8Gi`. Only the
forms the API server accepts are parsed; anything else raises ValueError with the bad value.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(?:[eE]([+-]?[0-9]+))?([a-zA-Z]*)$")
_BINARY = ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki")


def parse(value: int | float | str, field: str = "quantity") -> Decimal:
    """A quantity as a Decimal in base units; ValueError names the field and the value."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: {value!r} is not a quantity; write e.g. 2, 500m or 8Gi")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{field}: {value!r} must not be negative")
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match or match.group(3) not in _SUFFIXES:
        raise ValueError(f"{field}: {value!r} is not a quantity; write e.g. 2, 500m or 8Gi")
    number, exponent, suffix = match.groups()
    try:
        result = Decimal(number) * _SUFFIXES[suffix]
        if exponent:
            result *= Decimal(10) ** int(exponent)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ValueError(f"{field}: {value!r} is not a quantity") from exc
    return result


def cpu_string(cores: Decimal) -> str:
    """CPU cores in Kubernetes' canonical form: whole cores or millicores."""
    milli = (cores * 1000).to_integral_value(rounding="ROUND_CEILING")
    if milli % 1000 == 0:
        return str(int(milli // 1000))
    return f"{int(milli)}m"


def memory_string(size: Decimal) -> str:
    """Bytes in the largest binary unit that divides them exactly, else plain bytes."""
    whole = int(size.to_integral_value(rounding="ROUND_CEILING"))
    for suffix in _BINARY:
        unit = int(_SUFFIXES[suffix])
        if whole and whole % unit == 0:
            return f"{whole // unit}{suffix}"
    return str(whole)


def as_float(value: Decimal) -> float:
    return float(value)


def as_bytes(value: Decimal) -> int:
    return int(value.to_integral_value(rounding="ROUND_CEILING"))
