"""Safe, line-aware YAML loading.

PyYAML composes the document into a node graph (cheap, even for alias bombs, because aliased
nodes are shared), and we build the Python values ourselves so that we can:
- remember the line of every key and item (errors name file, line and field),
- refuse duplicate keys (PyYAML silently keeps the last one),
- bound the work of alias expansion (a "billion laughs" file is refused in milliseconds),
- accept only the safe standard tags.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from .errors import Problem, SpecError

MAX_FILE_BYTES = 5 * 1024 * 1024
MAX_NODES = 200_000  # values built after alias expansion; real configs have a few hundred
MAX_DEPTH = 100  # nesting levels; real configs have fewer than ten

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PLAIN = (str, int, float, bool, type(None))  # what JSON holds: values of anything else are refused

FieldPath = tuple[str | int, ...]  # ("available_node_types", "gpu", "max_workers"), or with ints


@dataclass(frozen=True)
class Document:
    """A parsed YAML mapping plus where each of its fields was written."""

    file: str
    data: dict[str, Any]
    lines: dict[FieldPath, tuple[int, int]]  # field path -> (line, column), 1-based
    raw: bytes = field(default=b"", repr=False, compare=False)   # the file's bytes (`load_file`)

    @property
    def sha256(self) -> str:
        """Of the file's bytes; "" for text not read from a file. Hashed when asked (`validate`
        never asks, and does not pay for hashlib's import)."""
        if not self.raw:
            return ""
        import hashlib

        return hashlib.sha256(self.raw).hexdigest()

    def line_of(self, path: FieldPath) -> int | None:
        """Line of the field, or of its nearest written parent (a missing key's mapping)."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path][0]
            if not path:
                return None
            path = path[:-1]

    def problem(self, path: FieldPath, message: str, hint: str | None = None) -> Problem:
        line = self.line_of(path)
        return Problem(file=self.file, line=line, field=format_path(path), message=message, hint=hint)


def format_path(path: FieldPath) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + (str(part) or '""')  # an empty key shows as ""
    return text


class _Builder:
    def __init__(self, file: str, loader: SafeConstructor) -> None:
        self.file = file
        self.loader = loader
        self.lines: dict[FieldPath, tuple[int, int]] = {}
        self.count = 0

    def fail(self, node: yaml.Node, message: str, path: FieldPath = (), hint: str | None = None) -> SpecError:
        mark = node.start_mark
        return SpecError([Problem(self.file, message, mark.line + 1, mark.column + 1, format_path(path),
                                  hint)])

    def build(self, node: yaml.Node, path: FieldPath) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise self.fail(
                node,
                f"the document expands to more than {MAX_NODES} values (too many aliases?)",
                path,
            )
        if len(path) > MAX_DEPTH:
            raise self.fail(node, f"the document is nested more than {MAX_DEPTH} levels deep", path[:3])
        if path not in self.lines:
            self.lines[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
            raise self.fail(node, f"unsupported tag '{node.tag}' (only plain YAML is read)", path)
        if isinstance(node, yaml.MappingNode):
            return self.build_mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        try:
            value = self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.fail(node, f"unsupported value: {getattr(exc, 'problem', exc)}", path) from None
        except (ValueError, TypeError, OverflowError) as exc:  # `!!float nope`, `!!int x`, a bad date
            raise self.fail(node, f"unsupported value: {node.tag.rsplit(':', 1)[-1]} {node.value!r} "
                            f"({exc})", path) from None
        if not isinstance(value, _PLAIN):  # a date, bytes, a set: JSON (and Ray's config) has none
            kind = node.tag.rsplit(":", 1)[-1]
            raise self.fail(node, f"unsupported value: YAML reads {node.value!r} as a {kind}, "
                            "not text, a number, true/false or null", path,
                            "quote it to keep it as text")
        return value

    def build_mapping(self, node: yaml.MappingNode, path: FieldPath) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        merged: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        raise self.fail(source, "a '<<' merge needs a mapping", path + ("<<",))
                    for k, v in self.build_mapping(source, path).items():
                        merged.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, "keys must be plain scalars", path + ("<key>",))
            key = self.build(key_node, path + ("<key>",))
            if isinstance(key, (list, dict)) or not _hashable(key):
                raise self.fail(key_node, "keys must be plain scalars", path + ("<key>",))
            if key in result:
                first = self.lines.get(path + (key,), (None,))[0]
                raise self.fail(
                    key_node, f"duplicate key '{key}' (first written on line {first})", path + (key,)
                )
            self.lines[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            result[key] = self.build(value_node, path + (key,))
        for k, v in merged.items():
            result.setdefault(k, v)
        return result


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _expanded_size(root: yaml.Node) -> tuple[int, int]:
    """How many values the node graph expands to, counting shared (aliased) nodes every time,
    and how many distinct nodes it has (the values written in the file).

    Memoised per node, so it costs the number of distinct nodes, not the expanded size.
    A cycle (a recursive alias) counts as too large.
    """
    sizes: dict[int, int] = {}
    stack = [(root, False)]
    while stack:  # iterative post-order: no recursion limit on deep documents
        node, children_done = stack.pop()
        if children_done:
            sizes[id(node)] = min(1 + sum(sizes.get(id(c), 10**12) for c in _children(node)), 10**12)
            continue
        if id(node) in sizes:
            continue
        sizes[id(node)] = 10**12  # provisional: seen again before finishing means a cycle
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)], len(sizes)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


# What PyYAML says when a line is indented where it does not belong (or holds a tab).
_INDENTATION = ("did not find expected key", "mapping values are not allowed here",
                "did not find expected '-' indicator", "expected <block end>",
                "could not find expected ':'")


def _syntax_hint(text: str, exc: yaml.MarkedYAMLError, line: int | None) -> str | None:
    """How to fix the usual syntax errors: a tab, or a line indented unlike its neighbours."""
    said = f"{exc.problem or ''} {exc.context or ''}"
    lines = text.splitlines()
    near = lines[max(0, (line or 1) - 3):(line or 1)]
    indents = [row[:len(row) - len(row.lstrip())] for row in near]
    if any("\t" in indent for indent in indents) or "'\\t'" in said:
        return "indent with spaces: YAML does not take tabs"
    if any(marker in said for marker in _INDENTATION):
        which = f"line {line}" if line else "the line"
        return (f"check the indentation of {which} against the lines above it: the keys of "
                "one section start in the same column, a key of a section further right than "
                "the section's name")
    return None


def _reader_problem(exc: yaml.reader.ReaderError) -> str:
    character = exc.character
    code = ord(character) if isinstance(character, str) else character
    return f"the character U+{code:04X} is not allowed in YAML (control and special characters are not)"


def load_text(text: str, file: str) -> Document:
    """Parse YAML text into a Document. Raises SpecError for anything that is not a mapping."""
    if not text.strip():
        raise SpecError([Problem(file, "the file is empty; expected a YAML mapping")])
    try:
        loader = _Loader(text)
    except UnicodeEncodeError as exc:  # a lone surrogate: text no file decoded as UTF-8 can hold
        raise SpecError([Problem(file, f"not valid text: the character at offset {exc.start} is a lone "
                                 "UTF-16 surrogate", text.count("\n", 0, exc.start) + 1)]) from None
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            message = f"not valid YAML: {exc.problem or exc.context}"
            line = mark.line + 1 if mark else None
            column = mark.column + 1 if mark else None
            raise SpecError([Problem(file, message, line, column,
                                     hint=_syntax_hint(text, exc, line))]) from None
        except yaml.reader.ReaderError as exc:  # a character YAML does not allow, at an offset
            at = exc.position
            raise SpecError([Problem(file, f"not valid YAML: {_reader_problem(exc)}",
                                     text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at))]) from None
        except yaml.YAMLError as exc:
            raise SpecError([Problem(file, f"not valid YAML: {exc}")]) from None
        except RecursionError:
            raise SpecError([Problem(file, "the document is nested too deeply to read")]) from None
        if root is None:
            raise SpecError([Problem(file, "the file holds no YAML document; expected a mapping")])
        expanded, written = _expanded_size(root)
        if written > MAX_NODES:   # no alias needed: a file of that many keys or items
            raise SpecError([Problem(
                file, f"the document holds more than {MAX_NODES} values; a cluster or "
                "experiment file has a few hundred (is this the right file?)", 1)])
        if expanded > MAX_NODES:
            raise SpecError([Problem(
                file, f"the document expands to more than {MAX_NODES} values; "
                "aliases that expand this far are refused (an alias bomb?)", 1)])
        builder = _Builder(file, loader)
        data = builder.build(root, ())
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a {type(data).__name__} value"
        raise SpecError([Problem(file, f"expected a YAML mapping at the top level, found {kind}", 1)])
    return Document(file=file, data=data, lines=builder.lines)


def _kind(mode: int) -> str | None:
    """What a path that is not a regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: str | Path) -> bytes:
    """A regular file's bytes, at most MAX_FILE_BYTES, in bounded time; SpecError otherwise.

    The file is opened without blocking (a named pipe with no writer would block a plain open
    forever), then checked through the open descriptor, so a path swapped between a check and
    the open cannot slip past. A file that changes while it is read is refused, not half-read.
    """
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SpecError([Problem(name, "no such file")]) from None
    except IsADirectoryError:
        raise SpecError([Problem(name, "is a directory, expected a YAML file")]) from None
    except OSError as exc:
        raise SpecError([Problem(name, f"cannot read the file: {exc.strerror or exc}")]) from None
    try:
        before = os.fstat(fd)
        kind = _kind(before.st_mode)
        if kind == "a directory":
            raise SpecError([Problem(name, "is a directory, expected a YAML file")])
        if kind:
            raise SpecError([Problem(name, f"is {kind}, not a regular file; expected a YAML file")])
        if before.st_size > MAX_FILE_BYTES:
            raise SpecError([Problem(name, _too_large(before.st_size))])
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        after = os.fstat(fd)
    except OSError as exc:
        raise SpecError([Problem(name, f"cannot read the file: {exc.strerror or exc}")]) from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > MAX_FILE_BYTES:  # it grew past the limit while being read
        raise SpecError([Problem(name, _too_large(None))])
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise SpecError([Problem(name, "the file changed while it was being read",
                                 hint="is something still writing it? try again once it is written")])
    return raw


def _too_large(size: int | None) -> str:
    told = f" ({size:,} bytes)" if size is not None else ""
    return f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB{told}; a YAML spec is far smaller"


def load_file(path: str | Path) -> Document:
    """Read and parse a YAML file, turning every I/O and encoding problem into a SpecError."""
    name = str(path)
    raw = read_bytes(path)
    if b"\x00" in raw:
        raise SpecError([Problem(name, "the file is binary (it contains NUL bytes), not YAML")])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(
            [Problem(name, f"the file is not UTF-8 text (bad byte at offset {exc.start})")]
        ) from None
    import dataclasses

    return dataclasses.replace(load_text(text, name), raw=raw)
