"""Load the JSON schemas and turn jsonschema's errors into Problems with lines and hints."""
from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Problem
from ..util.text import did_you_mean
from ..yamlload import Document, FieldPath, format_path

if TYPE_CHECKING:
    from jsonschema import ValidationError

_TYPE_NAMES = {
    "object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
    "number": "a number", "boolean": "true or false", "null": "null",
}


def schema_dir() -> Path:
    """The schemas: inside the installed package, or the repository's top-level schemas/."""
    packaged = Path(__file__).resolve().parent.parent / "schemas"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / "schemas"


@cache
def load_schema(name: str) -> dict[str, Any]:
    with open(schema_dir() / f"{name}.schema.json", encoding="utf-8") as handle:
        schema: dict[str, Any] = json.load(handle)
        return schema


@cache
def _validator(name: str) -> Any:  # a jsonschema Validator (jsonschema is untyped)
    import jsonschema

    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def describe_value(value: object) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    kind = {int: "integer", float: "number", str: "string"}.get(type(value), type(value).__name__)
    return f"{kind} {text}"


# Names people reach for that are another name's here: (the field, the value in lower case) ->
# the value meant. Offered only when that value is one the field takes. A trainer's own are in
# its module (`Trainer.ALIASES`), read by `_meant`.
ALIASES = {
    **{("type", name): "kuberay" for name in ("kubernetes", "k8s", "kube", "ray-operator")},
    **{("type", name): "local" for name in ("onprem", "on-prem", "on_prem", "ssh", "hosts",
                                            "bare-metal", "baremetal")},
    **{("type", name): "aws" for name in ("ec2", "amazon")},
    **{("type", name): "gcp" for name in ("gce", "google", "googlecloud", "google-cloud")},
    ("type", "microsoft"): "azure",
}
# What each of those values stands for, said with the fix.
MEANING = {"kuberay": "Kubernetes, through KubeRay's operator",
           "local": "Ray's name for on-prem: hosts you name, reached over SSH",
           "aws": "Amazon EC2", "gcp": "Google Compute Engine", "azure": "Azure virtual machines"}
# Values no field takes yet, with what to write instead: (the field, the value in lower case) ->
# the hint. None now (issue 51 made `format: images` and `trainer: tensorflow` real).
NOT_YET: dict[tuple[str, str], str] = {}


def enum_hint(path: FieldPath, value: Any, choices: list[Any]) -> str | None:
    """How to fix a value a field does not take: its case (`AWS`), another name for one it
    takes (`kubernetes`: kuberay), one not built yet, or a close spelling."""
    field = str(path[-1]) if path else ""
    if isinstance(value, str):
        lowered = value.strip().lower()
        for choice in choices:
            if isinstance(choice, str) and choice.lower() == lowered and choice != value:
                return f"did you mean '{choice}'? it is written in {_case(choice)}"
        meant = _meant().get((field, lowered))
        if meant is not None and meant[0] in choices:
            return f"did you mean '{meant[0]}'? {meant[0]} is {meant[1]}"
        if (field, lowered) in NOT_YET:
            return NOT_YET[(field, lowered)]
    return did_you_mean(value, choices)


@cache
def _meant() -> dict[tuple[str, str], tuple[str, str]]:
    """(field, another name) -> (the value meant, what it stands for): ALIASES, and each
    trainer's own (`Trainer.ALIASES`, `TITLE`; the registry is imported only here, when a value
    is already wrong)."""
    from .. import trainers

    table = {key: (value, MEANING[value]) for key, value in ALIASES.items()}
    for name in trainers.names():
        trainer = trainers.get(name)
        table.update({("trainer", alias): (name, trainer.TITLE) for alias in trainer.ALIASES})
    return table


def _case(word: str) -> str:
    return "lower case" if word.islower() else "upper case" if word.isupper() else "that case"


def _belongs_under(key: str, schema: dict[str, Any]) -> str | None:
    """For a top-level key no top-level field has: the section whose field it is (a line
    dedented out of its section), said with the fix."""
    sections = sorted(name for name, field in schema.get("properties", {}).items()
                      if isinstance(field, dict) and key in _section_keys(field, schema))
    if not sections:
        return None
    where = " or ".join(f"'{name}'" for name in sections)
    return f"'{key}' is a field of {where}: indent it under {sections[0]}:"


def _section_keys(field: dict[str, Any], root: dict[str, Any]) -> set[str]:
    """The keys a section takes (through a $ref and one level of oneOf/anyOf)."""
    ref = field.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        node: Any = root
        for part in ref[2:].split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        field = node if isinstance(node, dict) else {}
    keys = set(field.get("properties", {}))
    for branch in (*field.get("oneOf", ()), *field.get("anyOf", ())):
        if isinstance(branch, dict):
            keys |= set(branch.get("properties", {}))
    return keys


def _allowed_keys(schema: dict[str, Any]) -> list[str]:
    return sorted(schema.get("properties", {}))


def _translate(error: ValidationError, doc: Document) -> list[Problem]:
    path = tuple(error.absolute_path)
    v, value, schema = error.validator, error.instance, error.schema
    if "propertyNames" in error.schema_path and isinstance(value, str):
        path += (value,)   # a key that is not allowed: its own line and field
    custom = schema.get("x-message") if isinstance(schema, dict) else None
    if v == "additionalProperties" and isinstance(value, dict):
        allowed = _allowed_keys(schema)
        problems = []
        patterns = list(schema.get("patternProperties", {}))
        for key in value:
            if key in schema.get("properties", {}) or any(re.search(p, str(key)) for p in patterns):
                continue
            hint = did_you_mean(key, allowed)
            if hint is None and not path:
                hint = _belongs_under(str(key), schema)
            if hint is None and allowed and len(allowed) <= 15:
                hint = "allowed keys: " + ", ".join(allowed)
            problems.append(doc.problem(path + (key,), f"unknown key '{key}'", hint))
        return problems
    if v == "required":
        missing = [k for k in error.validator_value if isinstance(value, dict) and k not in value]
        # the field is the missing key; its line is the mapping's (Document.line_of walks up)
        return [doc.problem(path + (k,), f"missing required key '{k}'", custom) for k in missing]
    if custom:
        return [doc.problem(path, f"{custom}, got {describe_value(value)}")]
    if v == "type":
        wanted: list[str] = (error.validator_value if isinstance(error.validator_value, list)
                             else [error.validator_value])
        names = " or ".join(_TYPE_NAMES.get(t, t) for t in wanted)
        return [doc.problem(path, f"expected {names}, got {describe_value(value)}")]
    if v == "enum":
        choices = ", ".join(str(c) for c in error.validator_value)
        return [doc.problem(path, f"expected one of: {choices}; got {describe_value(value)}",
                            enum_hint(path, value, error.validator_value))]
    if v == "const":
        return [doc.problem(path, f"expected {error.validator_value!r}, got {describe_value(value)}")]
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[v]
        return [doc.problem(path, f"must be {op} {error.validator_value}, got {describe_value(value)}")]
    if v in ("minItems", "maxItems"):
        op = "at least" if v == "minItems" else "at most"
        return [doc.problem(path, f"expected a list with {op} {error.validator_value} item(s)")]
    if v == "minProperties":
        return [doc.problem(path, f"expected at least {error.validator_value} key(s)")]
    if v == "maxProperties":
        return [doc.problem(path, f"expected at most {error.validator_value} key(s)")]
    if v == "pattern":   # every pattern of the shipped schemas has its words (x-message)
        return [doc.problem(path, f"{describe_value(value)} is not in the form this field takes",
                            schema.get("description") if isinstance(schema, dict) else None)]
    if v in ("oneOf", "anyOf") and error.context:
        # Report the alternative that got furthest: the deepest error among the branches.
        deepest = max(error.context, key=lambda e: (len(e.absolute_path), -len(e.context or ())))
        if len(deepest.absolute_path) > len(error.absolute_path):
            return _translate(deepest, doc)
        options = [s.get("description") or s.get("type") for s in error.validator_value]
        options = [str(o) for o in options if o]
        expected = " or ".join(options) if options else "one of the documented forms"
        return [doc.problem(path, f"expected {expected}, got {describe_value(value)}")]
    if v == "not":
        return [doc.problem(path, schema.get("description", "this value is not allowed here"))]
    return [doc.problem(path, error.message)]


NOT_A_STRING = " is not a string"


def key_problems(doc: Document, value: Any = None, path: FieldPath = ()) -> list[Problem]:
    """Keys that are not strings (`1:`, `yes:`, `null:`): JSON and Ray's configs have none."""
    value = doc.data if value is None and not path else value
    problems: list[Problem] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                text, hint = _key_text(key)
                problems.append(Problem(
                    doc.file, f"the key {describe_value(key)}{NOT_A_STRING}",
                    doc.line_of(path + (key,)), None, format_path(path + (text,)), hint))
            else:
                problems += key_problems(doc, item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            problems += key_problems(doc, item, path + (index,))
    return problems


def _key_text(key: object) -> tuple[str, str]:
    """How a non-string key is shown in a field path, and what to do about it."""
    if isinstance(key, bool):
        return str(key).lower(), "quote it: YAML reads yes, no, on, off, true, false as booleans"
    if key is None:
        return "null", "quote it: YAML reads null, ~ and an empty key as null"
    return str(key), f"quote it: '{key}'"


def broken_keys(problems: list[Problem]) -> set[str] | None:
    """The top-level keys the errors among `problems` are in (an unknown key is its own);
    None when one is about the document as a whole, or when keys that are not strings kept the
    schema from being checked at all (`schema_problems` reports those alone)."""
    keys = set()
    for problem in problems:
        if problem.severity == "warning":
            continue
        if problem.message.endswith(NOT_A_STRING):
            return None
        top = re.split(r"[.\[]", problem.field, maxsplit=1)[0]
        if not top:
            return None
        keys.add(top)
    return keys


def schema_problems(doc: Document, name: str) -> list[Problem]:
    """Every schema violation in the document, sorted by line, each with a readable message."""
    problems = key_problems(doc)
    if problems:  # jsonschema expects string keys; report these first
        return problems
    for error in _validator(name).iter_errors(doc.data):
        problems.extend(_translate(error, doc))
    unique = {(p.line, p.field, p.message): p for p in problems}
    return sorted(unique.values(), key=lambda p: (p.line or 0, p.field))
