"""Put a RayJob's code into its package store (orchestrator.render.packages names the zips).

    put(store, shipped) -> {"working_dir": URI, "orchestrate": URI}

A zip already in the store (its name is its content's digest) is not written again. `file:///`
stores are folders (each zip written whole, then renamed into place, readable by the pods' own
user); `s3://` goes through boto3 (the `aws` extra), `gs://` through google-cloud-storage. The
cluster's image needs the same to read them (Ray's s3:// and gs:// package URIs use them).
"""
from __future__ import annotations

import os
import tempfile
import urllib.parse
import zipfile
from pathlib import Path
from typing import Any

from ..errors import ClusterError, MissingDependency
from ..render import packages
from ..util.progress import Progress
from ..util.workdir import WorkingDir

# A fixed time in every entry: the same files make the same zip.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def write_zip(files: WorkingDir, target: Path, top: str) -> None:
    """`files` under one folder `top/` (which Ray strips when it unpacks a remote zip)."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, _ in files.files:
            entry = zipfile.ZipInfo(f"{top}/{name}", ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = ((files.root / name).stat().st_mode & 0o777) << 16
            archive.writestr(entry, (files.root / name).read_bytes())


def put(store: str, shipped: WorkingDir | None, progress: Progress) -> dict[str, str]:
    package = packages.orchestrate_files()
    uris = packages.uris(store, shipped, package)
    wanted = [("orchestrate", package, "orchestrate/orchestrator")]
    if shipped is not None:
        wanted.append(("working_dir", shipped, "working_dir"))
    with tempfile.TemporaryDirectory(prefix="orchestrate-package-") as scratch:
        for kind, files, top in wanted:
            target = uris[kind]
            if _exists(target):
                progress(f"  {kind}: {target} (in the store already)")
                continue
            local = Path(scratch) / f"{kind}.zip"
            write_zip(files, local, top)
            _upload(local, target)
            progress(f"  {kind}: {target} ({local.stat().st_size // 1024} KiB)")
    return uris


def _split(uri: str) -> tuple[str, str, str]:
    parsed = urllib.parse.urlparse(uri)
    return parsed.scheme, parsed.netloc, parsed.path.lstrip("/")


def _exists(uri: str) -> bool:
    scheme, bucket, key = _split(uri)
    try:
        if scheme == "file":
            return Path(urllib.parse.urlparse(uri).path).is_file()
        if scheme == "s3":
            from botocore.exceptions import ClientError

            try:
                _s3().head_object(Bucket=bucket, Key=key)
                return True
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
        return bool(_gcs_blob(bucket, key).exists())
    except (ClusterError, MissingDependency):
        raise
    except Exception as exc:  # noqa: BLE001 - the SDKs' own errors: one line
        raise ClusterError(f"the package store {uri} could not be read: "
                           f"{str(exc).splitlines()[0][:200]}") from None


def _upload(local: Path, uri: str) -> None:
    scheme, bucket, key = _split(uri)
    try:
        if scheme == "file":
            # code, not secrets, read by the pods' own user on a shared volume: the umask's
            # modes for the folder, 0644 for each zip (mkstemp would make it 0600)
            target = Path(urllib.parse.urlparse(uri).path)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(local.read_bytes())
                os.chmod(partial, 0o644)
                os.replace(partial, target)
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
        elif scheme == "s3":
            _s3().upload_file(str(local), bucket, key)
        else:
            _gcs_blob(bucket, key).upload_from_filename(str(local))
    except (ClusterError, MissingDependency):
        raise
    except Exception as exc:  # noqa: BLE001 - the SDKs' own errors: one line
        raise ClusterError(f"the package store {uri} could not be written: "
                           f"{str(exc).splitlines()[0][:200]}") from None


def _s3() -> Any:
    try:
        import boto3
    except ImportError:
        raise MissingDependency("boto3", "aws") from None
    return boto3.client("s3")


def _gcs_blob(bucket: str, key: str) -> Any:
    try:
        from google.cloud import storage
    except ImportError:
        raise MissingDependency("google-cloud-storage", "gcp") from None
    return storage.Client().bucket(bucket).blob(key)
