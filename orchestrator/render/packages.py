"""Where a RayJob's (or RayService's) code is: zip files in a package store the Kubernetes
cluster reads (s3://, gs://, or file:/// on a volume its pods mount), named by their content.

    uris(store, shipped) -> {"working_dir": URI, "orchestrate": URI}

A job sent through the Job API has Ray upload its working_dir and orchestrate's package from
here; KubeRay's submitter runs in the Kubernetes cluster, so `run` puts them in the store first
(orchestrator.run.package_store) and the runtime_env names them. Ray unpacks a remote zip
without its single top-level folder (ray/_private/runtime_env/packaging.py,
`remove_top_level_directory=True`): each zip holds one folder, and orchestrate's holds the
`orchestrator` package inside it, so the package is what lands on the module path.
"""
from __future__ import annotations

from pathlib import Path

from ..util.workdir import DEFAULT_EXCLUDES, WorkingDir, scan
from .experiment import package_dir

DIGEST_CHARS = 24


def orchestrate_files() -> WorkingDir:
    """orchestrate's package as it is shipped (what Ray's py_modules upload would take). Its
    files' modes are the install's (all 0600 under a umask of 077), and it holds no secrets."""
    return scan(Path(package_dir()), DEFAULT_EXCLUDES, include_gitignore=False,
                refuse_private=False)


def zip_name(kind: str, files: WorkingDir) -> str:
    return f"{kind}-{files.digest()[:DIGEST_CHARS]}.zip"


def uri(store: str, name: str) -> str:
    return f"{store.rstrip('/')}/{name}"


def uris(store: str, shipped: WorkingDir | None,
         package: WorkingDir | None = None) -> dict[str, str]:
    found = {"orchestrate": uri(store, zip_name("orchestrate", package or orchestrate_files()))}
    if shipped is not None:
        found["working_dir"] = uri(store, zip_name("working_dir", shipped))
    return found
