"""KubeRay's API server, before it: what it would refuse in a rendered RayCluster, RayJob or
RayService, or drop without a word (orchestrator.launch.kuberay.check runs this first, then
the operator's rules).

The resource's CRD schema (`crds/`, KubeRay v1.7.0, the `storage: true` version, v1),
translated to JSON Schema (Draft 7) and checked with jsonschema, plus `metadata`, which the server
checks itself (the CRD only says `type: object` there).
- Pruning: a field the structural schema does not know is silently dropped by the server (there is
  no `x-kubernetes-preserve-unknown-fields` in these CRDs; it is honoured if it appears). A dropped
  field is a bug in what we rendered, so each one is a finding, and the rest is checked on the
  pruned object, as the server does. A null in a field that is not `nullable` is dropped the same way.
- Defaulting comes before validation on the server, so a `required` field with a `default`
  (e.g. workerGroupSpecs[].minReplicas/maxReplicas) is not required here.
- `x-kubernetes-int-or-string` accepts an integer or a string (the CRDs also carry the `anyOf`);
  the quantity `pattern` applies to strings only, as on the server. A float such as `cpu: 0.5`
  is neither, and the server refuses it too (quote it: "500m").
- `nullable: true` adds null to the type; `format: int32/int64` becomes the range of that type;
  other formats (date-time, only in status) are not checked.
- `x-kubernetes-list-type: map` (unique list-map keys, e.g. containers by name) and `set` are checked.
- `x-kubernetes-validations` (CEL) cannot be evaluated here. The ones in these CRDs are:
  `self == oldSelf` on `managedBy` and `gcsFaultToleranceOptions.backend` (transition rules: they
  apply to updates only, never to a resource as rendered, so not checked); `self in
  ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']` on `managedBy`; on RayJob
  `deletionStrategy` "not both legacy onSuccess/onFailure and deletionRules" and "both onSuccess and
  onFailure, or deletionRules"; on `deletionRules[].condition` "not both jobStatus and
  jobDeploymentStatus" and "one of them". All of those but the transition rules are re-implemented
  in Python (`_CEL` below, matched by their exact rule text; a rule not in the table is skipped).
- `metadata`: name a DNS-1123 subdomain (or generateName set), namespace a DNS-1123 label, label
  keys qualified names and values valid label values, annotation keys qualified names, string
  values, 256 KiB in all; unknown ObjectMeta fields are dropped like any other.
The schema findings have rule "schema" (or "metadata").

Pure: no kubernetes client, no network; stdlib, yaml and jsonschema (imported on first use).
"""
from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path as _FilePath
from typing import Any

import yaml

Path = tuple[str | int, ...]

API_VERSION = "ray.io/v1"
CRD_DIR = _FilePath(__file__).parent / "crds"
_CRD_FILES = {
    "RayCluster": "ray.io_rayclusters.yaml",
    "RayJob": "ray.io_rayjobs.yaml",
    "RayService": "ray.io_rayservices.yaml",
}


@dataclass(frozen=True)
class Finding:
    """One thing KubeRay (its API server or its operator) would refuse or silently drop."""

    path: Path  # where in the manifest, e.g. ("spec", "workerGroupSpecs", 0, "maxReplicas")
    message: str  # one line: what is wrong and what is allowed
    rule: str  # "schema", "metadata" or the short name of an operator rule


# ---------------------------------------------------------------- the CRD schemas

@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of the stored version (v1) of one kind's CRD; each file is 1-1.4 MB, so
    only the kind asked for is read, once."""
    text = (CRD_DIR / _CRD_FILES[kind]).read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


@functools.cache
def _validator(kind: str) -> Any:
    import jsonschema

    return jsonschema.Draft7Validator(to_json_schema(crd_schema(kind)))


_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_KEEP = {"type", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
         "uniqueItems", "minProperties", "maxProperties", "multipleOf"}


def to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A structural OpenAPI v3 schema as JSON Schema Draft 7, keeping what the API server validates
    (see the module docstring for each extension); pruning is not expressed here but done by `_prune`."""
    out: dict[str, Any] = {k: v for k, v in node.items() if k in _KEEP}
    if "properties" in node:
        props = node["properties"]
        out["properties"] = {k: to_json_schema(v) for k, v in props.items()}
        required = [r for r in node.get("required", []) if "default" not in props.get(r, {})]
        if required:
            out["required"] = required
    elif node.get("required"):
        out["required"] = list(node["required"])
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"])
    if "items" in node:
        out["items"] = to_json_schema(node["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in node:
            out[key] = [to_json_schema(s) for s in node[key]]
    if "not" in node:
        out["not"] = to_json_schema(node["not"])
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("format") in _INT_RANGES and out.get("type") == "integer":
        low, high = _INT_RANGES[node["format"]]
        out["minimum"] = max(out.get("minimum", low), low)
        out["maximum"] = min(out.get("maximum", high), high)
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _schema_findings(kind: str, manifest: dict[str, Any], out: list[Finding]) -> dict[str, Any]:
    """Prune like the API server (reporting what it drops), check metadata, then validate the pruned
    object against the translated schema; returns the pruned object for the operator rules."""
    schema = crd_schema(kind)
    body = {k: v for k, v in manifest.items() if k != "metadata"}
    pruned = _prune(body, schema, (), kind, out)
    metadata = manifest.get("metadata")
    out.extend(_metadata_findings(metadata, kind))
    pruned["metadata"] = metadata if isinstance(metadata, dict) else {}
    errors = sorted(_validator(kind).iter_errors(pruned), key=lambda e: [str(p) for p in e.absolute_path])
    out.extend(_schema_finding(e) for e in errors)
    return dict(pruned)


def _dotted(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "top level"


def _is_object(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" or "properties" in schema or "additionalProperties" in schema


def _prune(value: Any, schema: dict[str, Any], path: Path, kind: str, out: list[Finding]) -> Any:
    """The value as the API server keeps it: unknown fields and non-nullable nulls dropped, each one
    reported; list-type and CEL rules checked on the way."""
    if isinstance(value, dict) and _is_object(schema):
        props: dict[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        kept: dict[str, Any] = {}
        for key, item in value.items():
            sub = props.get(key) if isinstance(key, str) else None
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                if keep_unknown:
                    kept[key] = item
                else:
                    out.append(Finding(path + (key,), _unknown_field(key, props, path, kind), "schema"))
                continue
            if item is None and not sub.get("nullable"):
                out.append(Finding(path + (key,), f"{key!r} is null; the API server drops a null field "
                                   "that is not nullable: leave it out or give a value", "schema"))
                continue
            kept[key] = _prune(item, sub, path + (key,), kind, out)
        value = kept
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [_prune(v, schema["items"], path + (i,), kind, out) for i, v in enumerate(value)]
        out.extend(_list_type_findings(value, schema, path))
    out.extend(_cel_findings(value, schema, path))
    return value


def _unknown_field(key: Any, props: dict[str, Any], path: Path, kind: str) -> str:
    where = _dotted(path)
    close = difflib.get_close_matches(str(key), list(props), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key!r} is not a field of {kind}'s {where}; KubeRay's API server would drop it{hint}"


def _list_type_findings(items: list[Any], schema: dict[str, Any], path: Path) -> Iterator[Finding]:
    """x-kubernetes-list-type: the server refuses duplicate keys in a `map` list and duplicates in a `set`."""
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        defaults = {k: v.get("default") for k, v in schema["items"].get("properties", {}).items()}
        seen: set[str] = set()
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            ident = repr(tuple(item.get(k, defaults.get(k)) for k in keys))
            if ident in seen:
                shown = ", ".join(f"{k}={item.get(k, defaults.get(k))!r}" for k in keys)
                yield Finding(path + (i,), f"duplicate entry ({shown}) in {_dotted(path)}, a list keyed by "
                              f"{', '.join(keys)}; the API server refuses it", "schema")
            seen.add(ident)
    elif list_type == "set":
        seen_items: list[Any] = []
        for i, item in enumerate(items):
            if item in seen_items:
                yield Finding(path + (i,), f"duplicate value {item!r} in {_dotted(path)}, a set; "
                              "the API server refuses it", "schema")
            seen_items.append(item)


def _has(value: Any, key: str) -> bool:
    return isinstance(value, dict) and key in value


# The CEL rules (x-kubernetes-validations) of the three CRDs, by their exact text, in Python.
# `self == oldSelf` (managedBy, gcsFaultToleranceOptions.backend) compares with the stored object on
# update; a rendered resource has none, so it is left out.
_CEL: dict[str, Callable[[Any], bool]] = {
    "self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']":
        lambda s: s in ("ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue"),
    "!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))":
        lambda s: not ((_has(s, "onSuccess") or _has(s, "onFailure")) and _has(s, "deletionRules")),
    "((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))":
        lambda s: (_has(s, "onSuccess") and _has(s, "onFailure")) or _has(s, "deletionRules"),
    "!(has(self.jobStatus) && has(self.jobDeploymentStatus))":
        lambda s: not (_has(s, "jobStatus") and _has(s, "jobDeploymentStatus")),
    "has(self.jobStatus) || has(self.jobDeploymentStatus)":
        lambda s: _has(s, "jobStatus") or _has(s, "jobDeploymentStatus"),
}


def _cel_findings(value: Any, schema: dict[str, Any], path: Path) -> Iterator[Finding]:
    for rule in schema.get("x-kubernetes-validations", []):
        check = _CEL.get(rule.get("rule", ""))
        if check is not None and not check(value):
            yield Finding(path, f"{rule.get('message', rule['rule'])} (CRD validation rule)", "schema")


_QUANTITY = ("^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))"
             "(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$")
_JSON_TYPES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
               dict: "a mapping", type(None): "null"}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _schema_finding(error: Any) -> Finding:
    """One jsonschema error as a one-line Finding at its path; for anyOf/oneOf the most relevant
    sub-error, except int-or-string, which is said in its own words."""
    import jsonschema

    path: Path = tuple(error.absolute_path)
    value, schema = error.instance, error.schema
    kind = error.validator
    if kind in ("anyOf", "oneOf") and schema.get("anyOf") == [{"type": "integer"}, {"type": "string"}]:
        actual = _JSON_TYPES.get(type(value), "that")
        message = f"must be an integer or a string (int-or-string), not {actual} {_shown(value)}"
        if isinstance(value, float):
            message += "; write a quantity as a string, e.g. \"500m\""
        return Finding(path, message, "schema")
    if kind in ("anyOf", "oneOf") and error.context:
        return _schema_finding(jsonschema.exceptions.best_match(error.context))
    if kind == "pattern" and error.validator_value == _QUANTITY:
        return Finding(path, f"{_shown(value)} is not a Kubernetes quantity (like 1, 500m, 2Gi)", "schema")
    if kind == "type":
        wanted = error.validator_value if isinstance(error.validator_value, str) else error.validator_value[0]
        article = "an" if wanted[0] in "aeiou" else "a"
        actual = _JSON_TYPES.get(type(value), type(value).__name__)
        return Finding(path, f"must be {article} {wanted}, not {actual} {_shown(value)}", "schema")
    if kind == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return Finding(path, f"{_shown(value)} is not one of {allowed}", "schema")
    if kind == "required":
        match = re.match(r"^'(.+)' is a required property$", error.message)
        if match:
            return Finding(path + (match.group(1),), f"{match.group(1)!r} is required in {_dotted(path)}",
                           "schema")
    if kind in ("minimum", "maximum"):
        bound = "at least" if kind == "minimum" else "at most"
        return Finding(path, f"must be {bound} {error.validator_value}, not {_shown(value)}", "schema")
    return Finding(path, error.message.splitlines()[0][:200], "schema")


# ---------------------------------------------------------------- metadata (the API server's own checks)

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_OBJECT_META = {"name", "generateName", "namespace", "labels", "annotations", "ownerReferences", "finalizers",
                "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                "deletionGracePeriodSeconds", "managedFields", "selfLink"}


def _qualified_name_problem(key: str) -> str | None:
    """k8s.io/apimachinery validation.IsQualifiedName: [prefix/]name, prefix a DNS-1123 subdomain."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return "the prefix before '/' is empty"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"the prefix {prefix!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-', '.')"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return "the name part must be 1-63 characters: letters, digits, '-', '_', '.', starting and ending " \
               "with a letter or digit"
    return None


def _metadata_findings(metadata: Any, kind: str) -> Iterator[Finding]:
    at: Path = ("metadata",)
    if not isinstance(metadata, dict):
        yield Finding(at, f"{kind} needs metadata with a name", "metadata")
        return
    for key in metadata:
        if key not in _OBJECT_META:
            close = difflib.get_close_matches(str(key), sorted(_OBJECT_META), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            yield Finding(at + (key,), f"{key!r} is not a field of metadata; the API server would drop "
                          f"it{hint}", "metadata")
    name = metadata.get("name")
    if name is None and not metadata.get("generateName"):
        yield Finding(at + ("name",), "metadata.name is required (or metadata.generateName)", "metadata")
    elif name is not None and (not isinstance(name, str) or len(name) > 253
                               or not _DNS1123_SUBDOMAIN.match(name)):
        yield Finding(at + ("name",), f"name {_shown(name)} is not a DNS-1123 subdomain: at most 253 "
                      "lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
                      "metadata")
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or len(namespace) > 63
                                  or not _DNS1123_LABEL.match(namespace)):
        yield Finding(at + ("namespace",), f"namespace {_shown(namespace)} is not a DNS-1123 label: at most "
                      "63 lowercase letters, digits and '-'", "metadata")
    yield from _label_findings(metadata.get("labels"), at + ("labels",))
    yield from _annotation_findings(metadata.get("annotations"), at + ("annotations",))


def _label_value_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, not {_shown(value)}"
    if value and (len(value) > 63 or not _QUALIFIED_NAME.match(value)):
        return f"{_shown(value)} is not a label value: at most 63 letters, digits, '-', '_', '.', starting " \
               "and ending with a letter or digit (or empty)"
    return None


def _label_findings(labels: Any, at: Path) -> Iterator[Finding]:
    if labels is None:
        return
    if not isinstance(labels, dict):
        yield Finding(at, "labels must be a mapping of strings to strings", "metadata")
        return
    for key, value in labels.items():
        problem = _qualified_name_problem(key) if isinstance(key, str) else "must be a string"
        if problem:
            yield Finding(at + (key,), f"label key {_shown(key)}: {problem}", "metadata")
        problem = _label_value_problem(value)
        if problem:
            yield Finding(at + (key,), f"label {key!r}: {problem}", "metadata")


def _annotation_findings(annotations: Any, at: Path) -> Iterator[Finding]:
    if annotations is None:
        return
    if not isinstance(annotations, dict):
        yield Finding(at, "annotations must be a mapping of strings to strings", "metadata")
        return
    for key, value in annotations.items():
        problem = _qualified_name_problem(key.lower()) if isinstance(key, str) else "must be a string"
        if problem:
            yield Finding(at + (key,), f"annotation key {_shown(key)}: {problem}", "metadata")
        if not isinstance(value, str):
            yield Finding(at + (key,), f"annotation {key!r} must be a string, not {_shown(value)}",
                          "metadata")
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > 256 * 1024:
        yield Finding(at, f"annotations total {size} bytes; the API server allows 262144", "metadata")
