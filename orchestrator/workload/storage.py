"""Where a run's files are: `<storage_path>/<run name>/orchestrate/`, read and written through
pyarrow's filesystems, so local paths and s3:// or gs:// storage work the same.

The bottom of the workload: `results`, `tracking`, `card` and the trainers all read and write
through it, and it imports none of them.
"""
from __future__ import annotations

import json
import os
from typing import Any, cast

from ..contract import RESULTS_FOLDER as FOLDER
from ..contract import JobConfig
from ..util.uris import is_uri


def resolve(path: str) -> str:
    """URIs pass through; relative paths are relative to the job's working directory."""
    return path if is_uri(path) else os.path.abspath(path)


def storage_root(config: JobConfig) -> str:
    path = (config.get("run_config") or {}).get("storage_path") or "~/ray_results"
    return path if is_uri(path) else os.path.abspath(os.path.expanduser(path))


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def uri_in(base: str, path: str) -> str:
    """`path`, a path inside the filesystem of `base` (a run folder), as a URI pyarrow opens
    again: Ray Train's `Checkpoint.path` for `s3://bucket/x` storage is `bucket/x/...`, without
    the scheme, which `FileSystem.from_uri` refuses ("URI has empty scheme"). A local path, or
    a path that is a URI already, is returned as it is."""
    if not path or is_uri(path) or not is_uri(base):
        return path
    scheme, _, rest = base.partition("://")
    host = rest.split("/", 1)[0]
    inside = path.lstrip("/")
    if host and inside != host and not inside.startswith(host + "/"):
        inside = f"{host}/{inside}"   # a filesystem whose paths leave the host out (HDFS)
    return f"{scheme}://{'' if host else '/'}{inside}"   # file:///folder has no host


def _fs(uri: str) -> tuple[Any, str]:
    """(pyarrow FileSystem, path in it)."""
    import pyarrow.fs

    fs, path = pyarrow.fs.FileSystem.from_uri(uri)
    return fs, path


def write_bytes(uri: str, data: bytes) -> None:
    fs, path = _fs(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(data)


def read_bytes(uri: str) -> bytes | None:
    import pyarrow

    try:
        fs, path = _fs(uri)
        with fs.open_input_stream(path) as stream:
            return cast(bytes, stream.read())  # pyarrow is untyped
    except (OSError, pyarrow.ArrowException):
        return None


def exists(uri: str) -> bool:
    import pyarrow.fs

    fs, path = _fs(uri)
    return cast(bool, fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound)  # pyarrow is untyped


def read_history(run_uri: str) -> list[dict[str, Any]]:
    """The run's rows, each checkpoint as a URI like the run's (rows written before
    orchestrate kept the scheme hold the path inside the filesystem: `uri_in`)."""
    data = read_bytes(join(run_uri, FOLDER, "metrics.json"))
    rows: list[dict[str, Any]] = json.loads(data) if data else []
    for row in rows:
        if isinstance(row, dict) and isinstance(row.get("checkpoint"), str):
            row["checkpoint"] = uri_in(run_uri, row["checkpoint"])
    return rows
