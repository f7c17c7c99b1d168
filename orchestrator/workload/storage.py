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


def storage_root(config: JobConfig) -> str:
    path = (config.get("run_config") or {}).get("storage_path") or "~/ray_results"
    return path if is_uri(path) else os.path.abspath(os.path.expanduser(path))


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


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
    data = read_bytes(join(run_uri, FOLDER, "metrics.json"))
    return json.loads(data) if data else []
