"""Hypothesis strategies for hostile spec files, shared by tests/language/test_generated.py and
benchmarks/fuzz.py.

    yaml_texts()            random YAML trees dumped in random styles, then mutated as text
    example_mutations()     (text, path): every example and golden file, mutated as a tree
                            (keys dropped, renamed, retyped, nested deep, huge strings, odd
                            unicode, shared subtrees dumped as anchors and aliases) and as text
                            (lines duplicated, so keys are too; tags, aliases, control bytes)
    cluster_documents()     cluster files near the valid ones, as dicts, for each provider
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    [*REPO.glob("cluster_configs/*.yaml"), *REPO.glob("experiments/*.yaml"),
     *REPO.glob("services/*.yaml"), *REPO.glob("tests/render/golden/*.yaml"),
     *REPO.glob("tests/data/ray_examples/*/*.yaml")])
TEXTS = {path: path.read_text() for path in EXAMPLES}
TREES = {path: yaml.safe_load(text) for path, text in TEXTS.items()}

# Characters that have tripped parsers: controls, BOM, non-characters, surrogates, bidi
# overrides, line and paragraph separators, NEL, combining marks, wide and astral characters.
ODD = ["\x00", "\x01", "\x1b", "\t", "\r", "\x85", "\u2028", "\u2029", "\ufeff", "\ufffe", "\uffff",
       "\ud800", "\udfff", "\u202e", "\u0301", "\u00a0", "\u3000", "\U0001f600", "\U0010ffff",
       "𝓪", "ß", "İ", "ǅ", ":", "#", "&", "*", "!", "|", ">", "%", "@", "`", "'", '"', "-", "?",
       "{", "}", "[", "]", ",", "\\"]
odd_text = st.text(st.one_of(st.sampled_from(ODD), st.characters()), max_size=12)


def _keys(value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found.add(str(key))
            found |= _keys(item)
    elif isinstance(value, list):
        for item in value:
            found |= _keys(item)
    return found


KNOWN_KEYS = sorted(set().union(*(_keys(tree) for tree in TREES.values())))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 10), st.integers(), st.floats(allow_nan=True),
    st.text(max_size=20), odd_text, st.sampled_from(["yes", "no", "on", "off", "~", "null", "1e3",
                                                     "0x1F", "0o17", "2001-12-14", ".inf", "=",
                                                     "<<", "-", "", " "]))
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=10), st.integers(-3, 3),
                 st.booleans(), st.none(), odd_text)
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=25)


def dump(tree: Any, style: int) -> str:
    """YAML text of a tree: block, flow or mixed style, ASCII-escaped or not. Shared subtrees (the
    same object twice) come out as anchors and aliases."""
    try:
        return yaml.safe_dump(tree, default_flow_style=[False, True, None][style % 3],
                              allow_unicode=bool(style & 4), sort_keys=bool(style & 8),
                              width=[80, 20, 10**6][(style >> 4) % 3])
    except (yaml.YAMLError, UnicodeError, ValueError, RecursionError):
        return repr(tree)  # not YAML-dumpable (a lone surrogate): its repr is hostile text too


@st.composite
def text_mutations(draw: st.DrawFn, text: str) -> str:
    """A few edits of YAML text that a tree cannot express."""
    lines = text.splitlines(keepends=True) or ["\n"]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        edit = draw(st.sampled_from([
            "duplicate", "drop", "indent", "dedent", "insert", "tag", "alias", "anchor", "merge",
            "nest", "huge", "odd", "tab", "bom", "truncate", "document"]))
        line = lines[at]
        if edit == "duplicate":
            lines.insert(at, line)  # a mapping's key twice
        elif edit == "drop":
            del lines[at]
            lines = lines or ["\n"]
        elif edit == "indent":
            lines[at] = "  " + line
        elif edit == "dedent":
            lines[at] = line.lstrip(" ")
        elif edit == "insert":
            lines.insert(at, draw(odd_text) + ": " + draw(odd_text) + "\n")
        elif edit == "tag":
            tag = draw(st.sampled_from(["!!python/object/apply:os.system ['true']", "!custom x",
                                        "!!binary aGk=", "!!set {a, b}", "!!omap [a: 1]",
                                        "!!timestamp 2001-12-14", "!<tag:x> y", "!!float nope"]))
            lines.insert(at, f"tagged{at}: {tag}\n")
        elif edit == "alias":
            lines[at] = line.rstrip("\n") + " *" + draw(st.sampled_from(["a", "undefined", "id001"])) + "\n"
        elif edit == "anchor":
            lines.insert(at, "anchored: &a {x: [1, 2, 3]}\nagain: *a\nmore: [*a, *a, *a]\n")
        elif edit == "merge":
            lines.insert(at, draw(st.sampled_from(["<<: *a\n", "<<: [1, 2]\n", "<<: {x: 1}\n",
                                                   "<<: &b {y: 2}\n"])))
        elif edit == "nest":
            depth = draw(st.integers(20, 400))
            lines.insert(at, "deep: " + "[" * depth + "]" * depth + "\n")
        elif edit == "huge":
            lines.insert(at, "huge: " + draw(st.sampled_from("ax")) * draw(st.integers(10**4, 10**6)) + "\n")
        elif edit == "odd":
            cut = draw(st.integers(0, len(line)))
            lines[at] = line[:cut] + draw(st.sampled_from(ODD)) + line[cut:]
        elif edit == "tab":
            lines[at] = line.replace(" ", "\t", 1)
        elif edit == "bom":
            lines.insert(0, "\ufeff")
        elif edit == "truncate":
            lines[at] = line[:draw(st.integers(0, len(line)))]
        else:
            lines.insert(at, draw(st.sampled_from(["---\n", "...\n", "%YAML 1.1\n---\n", "--- |\n"])))
    return "".join(lines)


@st.composite
def yaml_texts(draw: st.DrawFn) -> str:
    tree = draw(trees)
    if draw(st.booleans()) and isinstance(tree, dict) and tree:
        shared = draw(trees)  # the same object in two places: anchors and aliases
        tree = {**tree, "first": shared, "second": [shared, shared]}
    text = dump(tree, draw(st.integers(0, 63)))
    return draw(text_mutations(text)) if draw(st.booleans()) else text


def _paths(value: Any, path: tuple[Any, ...] = (),
           above: frozenset[int] = frozenset()) -> list[tuple[Any, ...]]:
    """Every path into the tree; a recursive alias (a mutation made one) is not followed."""
    found = [path]
    if id(value) in above:
        return found
    inside = above | {id(value)}
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, path + (key,), inside)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, path + (index,), inside)
    return found


def _parent(tree: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        tree = tree[part]
    return tree


@st.composite
def tree_mutations(draw: st.DrawFn, tree: Any) -> Any:
    """Edits of a parsed example: keys dropped, renamed, retyped, values nested deep or made huge
    or odd, a subtree shared (an alias once dumped)."""
    tree = copy.deepcopy(tree)
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(tree) if p]
        if not paths:
            return draw(trees)
        path = draw(st.sampled_from(paths))
        parent, last = _parent(tree, path), path[-1]
        edit = draw(st.sampled_from(["drop", "rename", "retype", "nest", "huge", "odd", "share",
                                     "number"]))
        if edit == "drop":
            del parent[last]
        elif edit == "rename" and isinstance(parent, dict):
            new = draw(st.one_of(st.sampled_from(KNOWN_KEYS), keys,
                                 st.just(str(last)[:-1]), st.just(str(last).upper())))
            parent[new] = parent.pop(last)
        elif edit == "retype":
            parent[last] = draw(trees)
        elif edit == "nest":
            value = parent[last]
            for _ in range(draw(st.integers(5, 150))):
                value = draw(st.sampled_from([[value], {"x": value}]))
            parent[last] = value
        elif edit == "huge":
            parent[last] = draw(st.sampled_from(["a", "é", "\U0001f600", "x "])) * draw(
                st.integers(1000, 200_000))
        elif edit == "odd":
            parent[last] = draw(odd_text)
        elif edit == "share":  # the same object at two places: dumped as an anchor and an alias
            others = [q for q in paths if q[:len(path)] != path and path[:len(q)] != q]
            if others:
                other = draw(st.sampled_from(others))
                parent[last] = _parent(tree, other)[other[-1]]
            else:
                parent[last] = tree  # only ancestors: a recursive alias
        else:
            parent[last] = draw(st.sampled_from([-1, 0, 1, 2**63, -(2**63), 10**100, 1.5, True]))
    return tree


@st.composite
def example_mutations(draw: st.DrawFn) -> tuple[str, Path]:
    """(mutated text, the example's own path, so relative references still resolve)."""
    path = draw(st.sampled_from(EXAMPLES))
    if draw(st.booleans()):
        text = dump(draw(tree_mutations(TREES[path])), draw(st.integers(0, 63)))
    else:
        text = TEXTS[path]
    if draw(st.booleans()):
        text = draw(text_mutations(text))
    return text, path


# --- cluster files near the valid ones -------------------------------------------------------

small = st.integers(-1, 5)
INSTANCE_TYPES = ["m5.large", "m4.xlarge", "m4.4xlarge", "c5.2xlarge", "g4dn.xlarge", "x9.mega"]
HOSTS = ["10.0.0.1", "10.0.0.2", "host-a", "host_b", "::1", "", "a..b"]


def maybe(value: st.SearchStrategy[Any], p: int = 1) -> st.SearchStrategy[Any]:
    """`value`, or (about one time in p+1) a marker for "leave the key out"."""
    return st.one_of(*([value] * p), st.just(_MISSING))


_MISSING = object()


def _put(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not _MISSING:
        target[key] = value


def _provider(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    provider: dict[str, Any] = {"type": kind}
    if kind == "aws":
        _put(provider, "region", draw(maybe(st.sampled_from(["us-west-2", "us-east-1"]), 6)))
        _put(provider, "availability_zone", draw(maybe(st.just("us-west-2a"))))
    elif kind == "gcp":
        _put(provider, "region", draw(maybe(st.just("us-west1"), 6)))
        _put(provider, "availability_zone", draw(maybe(st.sampled_from(["us-west1-a", "eu-west4-b"]), 6)))
        _put(provider, "project_id", draw(maybe(st.sampled_from(["my-project", None]), 4)))
    elif kind == "azure":
        _put(provider, "location", draw(maybe(st.just("westus2"), 6)))
        _put(provider, "resource_group", draw(maybe(st.just("rg"), 4)))
    elif draw(st.integers(0, 5)) == 0:
        provider["coordinator_address"] = "127.0.0.1:1234"
    else:
        _put(provider, "head_ip", draw(maybe(st.sampled_from(HOSTS[:3]), 6)))
        _put(provider, "worker_ips", draw(maybe(st.lists(st.sampled_from(HOSTS), max_size=3), 6)))
    return provider


def _node_config(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    if kind == "aws":
        config: dict[str, Any] = {}
        _put(config, "InstanceType", draw(maybe(st.sampled_from(INSTANCE_TYPES), 6)))
        return config
    if kind == "gcp":
        return {"machineType": "n1-standard-2"}
    if kind == "azure":
        return {"azure_arm_parameters": {"vmSize": "Standard_D2s_v3"}}
    return {}


def _node_type(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    node: dict[str, Any] = {}
    _put(node, "node_config", draw(maybe(st.just(_node_config(draw, kind)), 8)))
    _put(node, "resources", draw(maybe(st.sampled_from([{}, {"CPU": 2}, {"CPU": 0, "GPU": 1},
                                                        {"custom": 1}, {"CPU": -1}]), 2)))
    _put(node, "min_workers", draw(maybe(small)))
    _put(node, "max_workers", draw(maybe(small)))
    return node


NODE_NAMES = ["ray.head.default", "ray.worker.default", "ray_head_default", "ray_worker_small",
              "head", "cpu", "gpu"]


@st.composite
def cluster_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A cluster file of any of the four providers, mostly well-formed, often with one thing
    wrong: every key the checks look at is drawn from valid and invalid values."""
    kind = draw(st.sampled_from(["aws", "gcp", "azure", "local"]))
    doc: dict[str, Any] = {"cluster_name": draw(st.sampled_from(
        ["demo", "ray-1", "Ray_2", "a" * 41, "1bad", "bad name", ""]))}
    doc["provider"] = _provider(draw, kind)
    _put(doc, "max_workers", draw(maybe(small, 2)))
    if draw(st.booleans()):
        doc["auth"] = {"ssh_user": draw(st.sampled_from(["ubuntu", "ec2-user", "bad user", "root;x"]))}
    if kind != "local" and draw(st.integers(0, 3)):
        names = draw(st.lists(st.sampled_from(NODE_NAMES), min_size=0, max_size=3, unique=True))
        doc["available_node_types"] = {name: _node_type(draw, kind) for name in names}
        _put(doc, "head_node_type", draw(maybe(st.sampled_from([*names, "missing"] if names else
                                                               ["missing"]), 2)))
    elif kind != "local" and draw(st.integers(0, 3)) == 0:  # orchestrate's shorthand
        doc["head"] = {"instance_type": draw(st.sampled_from(INSTANCE_TYPES)), "cpus": 0}
        doc["workers"] = {"cpu": {"instance_type": "m5.large", "min_workers": draw(small),
                                  "max_workers": draw(small)}}
    elif kind == "local" and draw(st.integers(0, 4)) == 0:
        doc[draw(st.sampled_from(["available_node_types", "head_node_type"]))] = draw(
            st.sampled_from([{}, "", None, {"x": {"node_config": {}, "resources": {}}}, "x"]))
    for key in ("head_node", "worker_nodes"):
        if draw(st.integers(0, 5)) == 0:
            doc[key] = draw(st.sampled_from([{}, None, {"InstanceType": "m5.large"}]))
    if draw(st.integers(0, 5)) == 0:
        doc["min_workers"] = draw(small)
    if draw(st.integers(0, 5)) == 0:
        doc["docker"] = draw(st.sampled_from([{}, {"image": "rayproject/ray:latest",
                                                    "container_name": "ray"},
                                              {"image": "x"}, {"container_name": "c"}]))
    if draw(st.integers(0, 5)) == 0:
        doc["file_mounts"] = {"/remote": draw(st.sampled_from(["/", "/no/such/path", None, ""]))}
    if draw(st.integers(0, 5)) == 0:
        doc["setup_commands"] = draw(st.sampled_from([["echo hi"], [], "echo", [1]]))
    if draw(st.integers(0, 7)) == 0:
        doc[draw(st.sampled_from(["idle_timeout_minutes", "upscaling_speed", "unknown_key"]))] = \
            draw(st.sampled_from([5, 1.5, -1, "soon"]))
    return doc
