"""The CRD's CEL rules, run by the operator on the spec a job with a template runs with.

The API server checks a TrainJob's own spec against the CRD's rules, but a job that names a
template is checked without it: the rules that need a field a template may set are skipped
(`has(self.template) || ...`), and a rule that spans two fields never sees one field from the
template and the other from the job. So a template's PVC next to the job's own S3 storage, or a
template's `numWorkers: 5` next to the job's `workersPerPod: 2`, passed the API server. Here
the merged spec goes through every rule of the CRD (generated from the same models, so the two
cannot drift), evaluated with cel-python and the Kubernetes CEL functions the rules use, and a
refusal says which of the fields it names came from the template.

Transition rules (those that read `oldSelf`) compare two versions of the object; they are the
API server's alone.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from raytrain_contract.api import templates
from raytrain_operator.api import crd
from raytrain_operator.builders import quantities
from raytrain_operator.builders.errors import SpecError

Path = tuple[str | int, ...]

#: `self.a.b` in a rule, without a method called on it (`self.name.lowerAscii()` names `name`).
_REFERENCE = re.compile(r"\bself((?:\.[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_]*\())+)")


class _Quantity(celtypes.StringType):
    """What `quantity(s)` returns: the text, and its value for compareTo."""

    value: Decimal

    def __new__(cls, text: str, value: Decimal) -> _Quantity:
        made: _Quantity = super().__new__(cls, text)  # type: ignore[assignment]
        made.value = value
        return made


def _parse(text: Any) -> Decimal | None:
    try:
        return quantities.parse(str(text))
    except SpecError:
        return None


def _quantity(text: Any) -> Any:
    value = _parse(text)
    if value is None:
        return CELEvalError(f"quantities: {text!r} is not a quantity", ValueError, ())
    return _Quantity(str(text), value)


def _is_quantity(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_parse(text) is not None)


def _compare_to(left: Any, right: Any) -> celtypes.IntType:
    a, b = getattr(left, "value", None), getattr(right, "value", None)
    if a is None or b is None:
        raise TypeError("compareTo is a method of quantity(...)")
    return celtypes.IntType((a > b) - (a < b))


def _lower_ascii(text: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.lower() if "A" <= c <= "Z" else c for c in str(text)))


#: The functions of the Kubernetes CEL libraries that the CRD's rules call (and cel-python lacks).
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "lowerAscii": _lower_ascii,
}


@dataclass(frozen=True)
class Rule:
    rule: str
    message: str
    message_expression: str | None


@dataclass(frozen=True)
class Refusal:
    #: Where the rule sits, under spec (() for spec itself).
    path: Path
    #: The rule's message (its messageExpression's, when it has one).
    message: str
    #: The fields the rule reads, under spec, each with whether the TrainJob itself sets it.
    fields: tuple[tuple[Path, bool], ...]


@functools.lru_cache(maxsize=1)
def _spec_schema() -> Mapping[str, Any]:
    schema: Mapping[str, Any] = crd.openapi_schema()["properties"]["spec"]
    return schema


@functools.lru_cache(maxsize=1)
def _environment() -> celpy.Environment:
    return celpy.Environment()


@functools.cache
def _program(expression: str) -> celpy.Runner:
    env = _environment()
    return env.program(env.compile(expression), functions=FUNCTIONS)


def _rules(schema: Mapping[str, Any]) -> Iterator[Rule]:
    for found in schema.get("x-kubernetes-validations") or ():
        text = str(found["rule"])
        if "oldSelf" in text:
            continue
        yield Rule(text, str(found.get("message") or ""), found.get("messageExpression"))


_TYPES: dict[str, Callable[[Any], bool]] = {
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
}


#: The rule of a value whose type is wrong: it always fails.
_WRONG = "false"


def _type_rule(schema: Mapping[str, Any], value: Any) -> Rule | None:
    """The schema's type and required keys, as a rule the value already broke (pydantic would
    have coerced "yes" to true and "2" to 2, which the API server refuses); None when both are
    right."""
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, str) or _TYPES["integer"](value):
            return None
        return Rule(_WRONG, "must be an integer or a string", None)
    wanted = schema.get("type")
    if isinstance(wanted, str) and wanted in _TYPES and not _TYPES[wanted](value):
        return Rule(_WRONG, f"{value!r} must be of type {wanted}", None)
    missing = [
        k for k in schema.get("required") or () if isinstance(value, Mapping) and k not in value
    ]
    if missing:
        return Rule(_WRONG, f"{', '.join(missing)} is required here", None)
    return None


Found = tuple[Path, Rule, Mapping[str, Any], Any]


def _walk(schema: Mapping[str, Any], data: Any, path: Path) -> Iterator[Found]:
    """Each (path, rule, schema, value) of the rules of ``schema`` on ``data``, outermost
    first."""
    wrong = _type_rule(schema, data)
    if wrong is not None:
        yield path, wrong, schema, data
        return
    for found in _rules(schema):
        yield path, found, schema, data
    if isinstance(data, Mapping):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in data.items():
            if isinstance(properties, Mapping) and key in properties:
                yield from _walk(properties[key], value, (*path, key))
            elif isinstance(extra, Mapping):
                yield from _walk(extra, value, (*path, key))
    elif isinstance(data, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(data):
            yield from _walk(schema["items"], item, (*path, index))


def _to_cel(schema: Mapping[str, Any], value: Any) -> Any:
    """``value`` as the API server hands it to a rule: by the schema's type, so a `number`
    written as 1 is the double 1.0 (json_to_cel alone would make it an int, and `1 * 0.5`
    has no overload in CEL)."""
    wanted = schema.get("type")
    if wanted == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return celtypes.DoubleType(float(value))
    if isinstance(value, Mapping):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        items: dict[Any, Any] = {}
        for key, item in value.items():
            if isinstance(properties, Mapping) and key in properties:
                items[celtypes.StringType(key)] = _to_cel(properties[key], item)
            elif isinstance(extra, Mapping):
                items[celtypes.StringType(key)] = _to_cel(extra, item)
            else:
                items[celtypes.StringType(key)] = json_to_cel(item)
        return celtypes.MapType(items)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return celtypes.ListType([_to_cel(schema["items"], item) for item in value])
    return json_to_cel(value)


#: Verdicts by (rule, schema, value): jobs made from one template share most of their values,
#: and cel-python takes milliseconds per rule. Bounded; cleared when full.
_VERDICTS: dict[tuple[Rule, int, str], tuple[bool, str]] = {}
_VERDICTS_MAX = 20_000


#: A check's values, by (id(value), id(schema), the keys a rule reads of it): their JSON (the
#: verdicts' key) and their CEL form, each made once however many rules read the same part.
Memo = dict[tuple[int, int, frozenset[str] | None], list[Any]]


def _evaluate_once(
    found: Rule, schema: Mapping[str, Any], value: Any, memo: Memo
) -> tuple[bool, str]:
    """_evaluate, remembered: the same rule on the same value gives the same verdict."""
    keys = _keys_read(found) if isinstance(value, Mapping) else None
    part = value if keys is None else {k: v for k, v in value.items() if k in keys}
    entry = memo.get((id(value), id(schema), keys))
    if entry is None:
        entry = [json.dumps(part, sort_keys=True, separators=(",", ":")), None]
        memo[(id(value), id(schema), keys)] = entry
    key = (found, id(schema), str(entry[0]))
    verdict = _VERDICTS.get(key)
    if verdict is None:
        if entry[1] is None:
            entry[1] = _to_cel(schema, part)
        verdict = _evaluate(found, entry[1])
        if len(_VERDICTS) >= _VERDICTS_MAX:
            _VERDICTS.clear()
        _VERDICTS[key] = verdict
    return verdict


def _evaluate(found: Rule, value: Any) -> tuple[bool, str]:
    """The verdict of one rule on ``value`` (a CEL value) and, when it fails, its message."""
    activation = {"self": value}
    try:
        result = _program(found.rule).evaluate(activation)
    except (CELEvalError, TypeError, ValueError) as exc:
        # The API server refuses an object a rule cannot evaluate on, too.
        return False, f"{found.message} (the rule could not be evaluated: {exc})"
    if isinstance(result, CELEvalError):
        return False, f"{found.message} (the rule could not be evaluated: {result})"
    if bool(result):
        return True, ""
    message = found.message
    if found.message_expression:
        try:
            said = _program(found.message_expression).evaluate(activation)
        except (CELEvalError, TypeError, ValueError):
            said = None
        if isinstance(said, str) and said:
            message = str(said)
    return False, message


#: `self`, with the key it reads when one follows (`self.a`), not a method (`self.all(`).
_SELF = re.compile(r"\bself\b(\.[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_]*\())?")


@functools.cache
def _keys_read(found: Rule) -> frozenset[str] | None:
    """The keys of `self` a rule (and its message) reads, when it reads `self` only through
    them (`self.a`, `self.b.c`); None when it reads `self` itself (`self.all(...)`). A rule
    is then evaluated on those keys alone: the same verdict, and a key for the verdicts that
    other jobs' specs share (a rule on spec reads a few of its fields, not all)."""
    keys: set[str] = set()
    for text in (found.rule, found.message_expression or ""):
        for match in _SELF.finditer(text):
            if match.group(1) is None:
                return None
            keys.add(match.group(1)[1:])
    return frozenset(keys)


def _referenced(found: Rule) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for match in _REFERENCE.finditer(found.rule):
        parts = tuple(match.group(1).lstrip(".").split("."))
        if parts not in out:
            out.append(parts)
    return out


def _without_nulls(node: Any) -> Any:
    """The API server drops a null field of a custom resource before it checks the rest (no
    field of ours is nullable); so does this check."""
    if isinstance(node, Mapping):
        return {k: _without_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_without_nulls(v) for v in node]
    return node


def check(own: Mapping[str, Any], template: Mapping[str, Any]) -> list[Refusal]:
    """The rules of the CRD that the spec ``own`` with ``template`` merged under it breaks.

    The merged spec is checked as if it were a TrainJob's own, without spec.template: a rule
    that a template could satisfy must be satisfied by the merge.
    """
    merged = _without_nulls(templates.merge(template, own))
    merged.pop("template", None)
    found_rules = list(_walk(_spec_schema(), merged, ()))
    # A value of the wrong type is the refusal to show: the rules around it would only fail
    # to evaluate on it (the API server checks the schema before its rules, too).
    wrong_types = [f for f in found_rules if f[1].rule == _WRONG]
    refusals: list[Refusal] = []
    memo: Memo = {}
    for path, found, schema, value in wrong_types or found_rules:
        ok, message = _evaluate_once(found, schema, value, memo)
        if ok:
            continue
        fields: list[tuple[Path, bool]] = []
        for rel in _referenced(found):
            where = (*path, *rel)
            if templates.has_path(merged, where):
                fields.append((where, _own(own, where)))
        # `has(self.a) && self.a.b ...` reads a.b: name the deepest fields only.
        fields = [
            (f, mine)
            for f, mine in fields
            if not any(len(g) > len(f) and g[: len(f)] == f for g, _ in fields)
        ]
        if not fields and path:
            # A rule on the value itself (its keys, its items): the value is the field.
            fields.append((path, _own(own, path)))
        refusals.append(Refusal(path, message, tuple(fields)))
    return refusals


def _own(own: Mapping[str, Any], path: Path) -> bool:
    """Whether the TrainJob's own spec sets the field at ``path``. Inside a list the merged
    index is not the job's, so a list the job sets counts as the job's."""
    for depth, part in enumerate(path):
        if isinstance(part, int):
            return templates.has_path(own, path[:depth])
    return templates.has_path(own, path)


def dotted(path: Path) -> str:
    """spec.a.b[0].c"""
    out = "spec"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def explain(refusal: Refusal, reference: tuple[str, str]) -> str:
    """One line for a Stalled condition: the rule's message, then which fields it read came
    from the template, and what to change."""
    kind, name = reference
    mine = [dotted(p) for p, own in refusal.fields if own]
    theirs = [dotted(p) for p, own in refusal.fields if not own]
    where = dotted(refusal.path)
    message = refusal.message
    if message.startswith("spec.*") and refusal.path:
        # A rule shared by spec.head and spec.workerTemplate: name the one that broke it.
        message = dotted(refusal.path[:1]) + message[len("spec.*") :]
    head = message if message.startswith("spec") else f"{where}: {message}"
    if theirs and mine:
        return (
            f"{head} ({', '.join(theirs)} from {kind} {name}; {', '.join(mine)} from the "
            "TrainJob); change or remove the TrainJob's field, or use a template that does "
            "not set the other"
        )
    if theirs:
        return (
            f"{head} ({', '.join(theirs)} from {kind} {name}); fix the template, or set the "
            "field in the TrainJob (the TrainJob's value wins)"
        )
    return f"{head} (with {kind} {name} merged in); fix this field of the TrainJob, or the template"
