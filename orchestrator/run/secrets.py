"""The experiment's secret variables (`env_vars: {NAME: {from_env: SOURCE}}`), shipped to the job
apart from its runtime_env.

Ray shows a job's runtime_env, env_vars included, to anyone who may list jobs (`ray job list`,
the dashboard, `orchestrate jobs`), and its runtime-env agent logs it. So the values go in a
small Python package (contract.SECRETS_MODULE) added to py_modules: Ray uploads it as a package
whose name is the digest of its content, made unguessable by a random nonce, and unpacks it on
the nodes that run the job, where `workload.worker` copies the values into os.environ. The file
written here is 0600 in 0700 temporary folders and removed once the job is submitted.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import contract


@contextlib.contextmanager
def shipped(runtime_env: dict[str, Any], names: Mapping[str, str],
            environ: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """`runtime_env` with the values of `names` (job's variable -> submitter's) in py_modules;
    `runtime_env` as is when there are none. KeyError if one is unset (prepare checks first)."""
    if not names:
        yield runtime_env
        return
    values = {name: environ[source] for name, source in names.items()}
    with tempfile.TemporaryDirectory(prefix="orchestrate-secrets-") as folder:
        package = Path(folder) / contract.SECRETS_MODULE   # a folder: Ray's job client
        package.mkdir(mode=0o700)                          # uploads no one-file module
        handle = os.open(package / "__init__.py", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "w", encoding="utf-8") as module:
            module.write(f'"""Written by orchestrate for one job."""\n'
                         f"NONCE = {secrets.token_hex(16)!r}\nVALUES = {values!r}\n")
        yield dict(runtime_env, py_modules=[*runtime_env.get("py_modules", []), str(package)])
