"""Write each schema's field table into the docs, so the tables cannot drift from schemas/*.json.

A table goes between two marker comments in a Markdown file under docs/:

    <!-- fields:experiment begin -->
    (generated: field, type, default, allowed values, description)
    <!-- fields:experiment end -->

`fields:NAME` is schemas/NAME.schema.json. Every such pair in docs/*.md is rewritten; the rest of
the file is left as it is. The output depends only on the schema files (same input, same bytes).

    python scripts/schema_docs.py          # rewrite the tables
    python scripts/schema_docs.py --check  # exit 1, naming the files, if a table is stale
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
DOCS = ROOT / "docs"
COMMAND = "python scripts/schema_docs.py"
MARKERS = re.compile(r"(<!-- fields:(?P<name>[a-z_]+) begin -->\n)(?P<body>.*?)"
                     r"(<!-- fields:(?P=name) end -->)", re.DOTALL)
# How deep a table goes: Ray's cluster schema nests cloud-specific blocks (provider.cloudwatch,
# a node type's node_config) further down, which Ray's and each cloud's docs describe.
MAX_DEPTH = {"cluster": 3}
DEFAULT_DEPTH = 5
NOT_EXPANDED = {"cluster": ("provider.",)}   # the provider's own sub-blocks are Ray's business
JSON_TYPES = {"str": "string", "bool": "boolean", "int": "integer", "float": "number", "NoneType": "null",
              "list": "array", "dict": "object"}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(value: Any) -> str:
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


def _resolve(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/definitions/"):
        target = dict(schema["definitions"][ref.rsplit("/", 1)[1]])
        target.update({k: v for k, v in node.items() if k != "$ref"})
        return target
    return node


def _type(node: dict[str, Any]) -> str:
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if isinstance(kind, str):
        if kind == "array" and isinstance(node.get("items"), dict):
            inner = _type(node["items"])
            return f"array of {inner}" if inner != "any" else "array"
        return kind
    if "enum" in node:
        return " or ".join(sorted({JSON_TYPES[type(v).__name__] for v in node["enum"]}))
    if "const" in node:
        return JSON_TYPES[type(node["const"]).__name__]
    for combinator in ("oneOf", "anyOf"):
        if combinator in node:
            return " or ".join(dict.fromkeys(_type(option) for option in node[combinator]))
    return "any"


def _allowed(node: dict[str, Any]) -> str:
    parts: list[str] = []
    if "enum" in node:
        parts.append(", ".join(_code(v) for v in node["enum"]))
    if "const" in node:
        parts.append(_code(node["const"]))
    if "x-message" in node:
        parts.append(str(node["x-message"]).removeprefix("expected "))
    elif "pattern" in node:
        parts.append(f"matches `{node['pattern']}`")
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        parts.append(f"{low} to {high}")
    elif low is not None:
        parts.append(f">= {low}")
    elif high is not None:
        parts.append(f"<= {high}")
    if "exclusiveMinimum" in node:
        parts.append(f"> {node['exclusiveMinimum']}")
    if "minLength" in node and node["minLength"] == 1 and "pattern" not in node:
        parts.append("not empty")
    if "minItems" in node:
        parts.append(f"at least {node['minItems']} item{'s' if node['minItems'] != 1 else ''}")
    if node.get("uniqueItems"):
        parts.append("no duplicates")
    if "minProperties" in node:
        parts.append(f"at least {node['minProperties']} entr{'ies' if node['minProperties'] != 1 else 'y'}")
    return "; ".join(parts)


def _children(node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The named sub-fields of an object (a pattern's entries as `<name>`), or of an array's items."""
    if node.get("type") == "array" and isinstance(node.get("items"), dict):
        return [(f"[].{key}", child) for key, child in _children(node["items"])]
    out = [(key, child) for key, child in (node.get("properties") or {}).items() if isinstance(child, dict)]
    for child in (node.get("patternProperties") or {}).values():
        if isinstance(child, dict):
            out.append(("<name>", child))
    return out


def rows(name: str) -> list[tuple[str, str, str, str, str]]:
    """(field, type, default, allowed values, description) for every field of schemas/NAME."""
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    depth_limit = MAX_DEPTH.get(name, DEFAULT_DEPTH)
    out: list[tuple[str, str, str, str, str]] = []

    def walk(node: dict[str, Any], prefix: str, depth: int) -> None:
        required = set(node.get("required") or [])
        if node.get("type") == "array" and isinstance(node.get("items"), dict):
            required = set(node["items"].get("required") or [])
        for key, raw in _children(node):
            child = _resolve(raw, schema)
            path = f"{prefix}.{key}" if prefix else key
            path = path.replace(".[]", "[]")
            description = str(child.get("description", ""))
            if key in required:
                description = f"**required**: {description}" if description else "**required**"
            default = _code(child["default"]) if "default" in child else ""
            out.append((f"`{path}`", _type(child), default, _allowed(child), description))
            if depth + 1 < depth_limit and not path.startswith(NOT_EXPANDED.get(name, ())):
                walk(child, path, depth + 1)

    walk(schema, "", 0)
    return out


def table(name: str) -> str:
    lines = [f"Generated from `schemas/{name}.schema.json` by `{COMMAND}`; do not edit by hand.", "",
             "| field | type | default | allowed values | description |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows(name)]
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """The Markdown text with every marked table regenerated."""
    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if not (SCHEMAS / f"{name}.schema.json").is_file():
            raise SystemExit(f"schema_docs: no schemas/{name}.schema.json for the marker fields:{name}")
        return f"{match.group(1)}{table(name)}{match.group(4)}"
    return MARKERS.sub(replace, text)


def stale() -> list[Path]:
    """The docs whose tables differ from what the schemas give."""
    return [path for path in sorted(DOCS.glob("*.md")) if render(path.read_text()) != path.read_text()]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        old = stale()
        for path in old:
            print(f"{path.relative_to(ROOT)}: a field table differs from the schema; run: {COMMAND}",
                  file=sys.stderr)
        return 1 if old else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        new = render(text)
        if new != text:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
