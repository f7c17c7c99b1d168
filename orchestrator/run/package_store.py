"""Put a RayJob's code into its package store (orchestrator.render.packages names the zips).

    put(store, shipped) -> {"working_dir": URI, "orchestrate": URI}

A zip already in the store (its name is its files' digest) is not written again, but it is read
back first: whoever can write the store runs code in every RayJob that names a zip of it, so a
zip whose files are not byte for byte the ones its name claims is refused, not named, and left
where it is for someone to look at. `file:///` stores are folders (each zip written whole, then
renamed into place, 0640 in a folder others may not enter: the pods' user reads them as its
owner or through its group); `s3://` goes through boto3 (the `aws` extra), `gs://` through
google-cloud-storage. The cluster's image needs the same to read them (Ray's s3:// and gs://
package URIs use them).
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import shlex
import stat
import tempfile
import urllib.parse
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

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
    """The zips of orchestrate's package and of `shipped` in `store`, written or, when there
    already, checked (ClusterError if one is not what its name claims); their URIs."""
    package = packages.orchestrate_files()
    uris = packages.uris(store, shipped, package)
    wanted = [("orchestrate", package, "orchestrate/orchestrator")]
    if shipped is not None:
        wanted.append(("working_dir", shipped, "working_dir"))
    if _split(store)[0] == "file":
        _private_folder(Path(urllib.parse.urlparse(store).path), progress)
    with tempfile.TemporaryDirectory(prefix="orchestrate-package-") as scratch:
        for kind, files, top in wanted:
            target = uris[kind]
            if _exists(target):
                check(target, files, top, Path(scratch) / f"{kind}-stored.zip")
                progress(f"  {kind}: {target} (in the store already, holding these files)")
                continue
            local = Path(scratch) / f"{kind}.zip"
            write_zip(files, local, top)
            _upload(local, target)
            progress(f"  {kind}: {target} ({local.stat().st_size // 1024} KiB)")
    return uris


def check(uri: str, files: WorkingDir, top: str, scratch: Path) -> None:
    """ClusterError unless the zip at `uri` holds `files` under `top/`, byte for byte, and
    nothing else (`scratch`: where a remote one is downloaded to)."""
    scheme, _, _ = _split(uri)
    local = Path(urllib.parse.urlparse(uri).path) if scheme == "file" else scratch
    if scheme != "file":
        _download(uri, local)
    why = differs(local, files, top)
    if why is not None:
        remove = f"rm {shlex.quote(str(local))}" if scheme == "file" else \
            f"{'aws s3' if scheme == 's3' else 'gcloud storage'} rm {shlex.quote(uri)}"
        raise ClusterError(
            f"{uri} in the package store is not the zip of the files its name claims ({why}): "
            "refused, no RayJob names it",
            hint="whoever can write the package store runs code in every RayJob that reads it: "
                 f"find out who wrote this zip, then remove it ({remove}) and run again to write "
                 "it anew")
    if scheme == "file":   # one written 0644 by an earlier build: as a new one is
        _tighten(local, 0o640)


def differs(archive_path: Path, files: WorkingDir, top: str) -> str | None:
    """How the zip at `archive_path` differs from `files` under `top/` (None: it does not)."""
    expected = {f"{top}/{name}": name for name, _ in files.files}
    try:
        with zipfile.ZipFile(archive_path) as archive:
            entries = archive.infolist()
            counts = collections.Counter(entry.filename for entry in entries)
            unlike = [(label, sorted(names)) for label, names in (
                ("it also holds", set(counts) - set(expected)),
                ("it lacks", set(expected) - set(counts)),
                ("it holds twice", {name for name, count in counts.items() if count > 1}))
                if names]
            if unlike:
                return "; ".join(f"{label} {_few(names)}" for label, names in unlike)
            for entry in entries:
                local = files.root / expected[entry.filename]
                if stat.S_IFMT(entry.external_attr >> 16) not in (0, stat.S_IFREG) or \
                        entry.file_size != local.stat().st_size:
                    return f"its {entry.filename} is not the file here"
                with archive.open(entry) as stored, open(local, "rb") as mine:
                    if _sha256(stored) != _sha256(mine):
                        return f"its {entry.filename} is not the file here"
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        return f"not a zip that reads: {(str(exc) or type(exc).__name__).splitlines()[0][:120]}"
    return None


def _few(names: list[str]) -> str:
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more


def _sha256(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    for block in iter(lambda: handle.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def _private_folder(folder: Path, progress: Progress) -> None:
    """A `file://` store's folder: made 0750; one of ours that others may enter loses that
    (its group and setgid bit stay: the pods may read through them). One every user may write
    is refused (anyone could swap a zip in it after the check, before the pods read it), and
    left as it is (`file:///tmp` run as root would otherwise close /tmp)."""
    if not folder.is_dir():
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.mkdir(mode=0o750, exist_ok=True)
        except OSError as exc:
            raise ClusterError(f"the package store {folder} could not be made: "
                               f"{exc.strerror or exc}") from None
        return
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & 0o002:
        raise ClusterError(
            f"the package store {folder} may be written by every user of this machine: "
            "whoever writes it runs code in every RayJob that reads it; refused",
            hint="use a folder of your own or of your team's group, not writable by others")
    if mode & 0o007 and _tighten(folder, 0o7770):
        progress(f"  {folder}: others may no longer enter it (mode {mode:04o} -> "
                 f"{stat.S_IMODE(folder.stat().st_mode):04o})")


def _tighten(path: Path, allowed: int) -> bool:
    """Drop the mode bits of `path` outside `allowed` when it is ours to change (True: done)."""
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid() or not mode & ~allowed:
        return False
    os.chmod(path, mode & allowed)
    return True


def _split(uri: str) -> tuple[str, str, str]:
    parsed = urllib.parse.urlparse(uri)
    return parsed.scheme, parsed.netloc, parsed.path.lstrip("/")


@contextlib.contextmanager
def _sdk_errors(uri: str, doing: str) -> Iterator[None]:
    """The SDKs' own errors as one line of ClusterError."""
    try:
        yield
    except (ClusterError, MissingDependency):
        raise
    except Exception as exc:  # noqa: BLE001 - the SDKs' own errors: one line
        raise ClusterError(f"the package store {uri} could not be {doing}: "
                           f"{str(exc).splitlines()[0][:200]}") from None


def _exists(uri: str) -> bool:
    scheme, bucket, key = _split(uri)
    with _sdk_errors(uri, "read"):
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


def _upload(local: Path, uri: str) -> None:
    scheme, bucket, key = _split(uri)
    with _sdk_errors(uri, "written"):
        if scheme == "file":
            # the job's code, read by the pods' user as the zip's owner or through its group
            # (the folder's, with its setgid bit): 0640, not mkstemp's 0600, nor for everyone
            target = Path(urllib.parse.urlparse(uri).path)
            fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(local.read_bytes())
                os.chmod(partial, 0o640)
                os.replace(partial, target)
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
        elif scheme == "s3":
            _s3().upload_file(str(local), bucket, key)
        else:
            _gcs_blob(bucket, key).upload_from_filename(str(local))


def _download(uri: str, local: Path) -> None:
    scheme, bucket, key = _split(uri)
    with _sdk_errors(uri, "read"):
        if scheme == "s3":
            _s3().download_file(bucket, key, str(local))
        else:
            _gcs_blob(bucket, key).download_to_filename(str(local))


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
