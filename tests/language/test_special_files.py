"""Special files given to `orchestrate validate` (and `render`, which loads one file): a named pipe,
a device, a directory, a symlink loop, a file growing while it is read, a 200 MB file. Each runs
the real CLI in a subprocess with a timeout: refused with a message naming the file, exit code 1
(2 for bad usage), no traceback, and no hang (a hang fails on the subprocess timeout).
"""
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 60  # generous on a busy 2-core machine; the commands take well under a second


def orchestrate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)


def refused(result: subprocess.CompletedProcess, path: Path | str, words: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    lines = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
    assert any(f"{path}" in line and words in line for line in lines), result.stderr
    return result.stderr


def test_named_pipe_without_a_writer_is_refused_not_waited_on(tmp_path):
    pipe = tmp_path / "cluster.yaml"
    os.mkfifo(pipe)
    refused(orchestrate("validate", str(pipe)), pipe, "is a named pipe, not a regular file")
    refused(orchestrate("render", str(pipe)), pipe, "is a named pipe")


def test_device_is_refused():
    refused(orchestrate("validate", "/dev/zero"), "/dev/zero", "is a device, not a regular file")


def test_directory_given_as_a_file(tmp_path):
    folder = tmp_path / "cluster.yaml"
    folder.mkdir()
    refused(orchestrate("render", str(folder)), folder, "is a directory, expected a YAML file")
    # validate walks folders: an empty one is said to be empty
    refused(orchestrate("validate", str(folder)), folder, "the folder holds no .yaml or .yml file")


def test_symlink_loop(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    refused(orchestrate("validate", str(loop)), loop, "Too many levels of symbolic links")
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.symlink_to(b)
    b.symlink_to(a)
    refused(orchestrate("validate", str(a)), a, "Too many levels of symbolic links")


def test_a_folder_holding_a_symlink_loop_and_a_pipe_is_walked_in_bounded_time(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "up").symlink_to(tmp_path)  # a directory loop
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "ok.yaml").write_text("cluster_name: ok\nprovider: {type: aws, region: us-west-2}\n")
    result = orchestrate("validate", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "ok.yaml (cluster)" in result.stdout and "Traceback" not in result.stderr


def test_a_file_growing_while_it_is_read(tmp_path):
    """A writer thread appends for as long as validate runs: validate still returns, refusing
    the file (whichever it saw: a change under it, a size past the limit, a snapshot of more
    values than a file of ours has, one cut inside a line, or one whose keys are not a
    cluster's) and naming it."""
    path = tmp_path / "growing.yaml"
    path.write_text("cluster_name: grows\n")
    stop = threading.Event()

    def write():
        with path.open("a") as handle:
            n = 0
            while not stop.is_set():
                handle.write("".join(f"key_{n + i}: {n + i}\n" for i in range(200)))
                handle.flush()
                n += 200
                if handle.tell() > 8 * 2**20:
                    stop.wait(0.001)  # past the limit: keep it changing, slowly

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        result = orchestrate("validate", str(path))
    finally:
        stop.set()
        writer.join(timeout=10)
    err = refused(result, path, "")
    assert any(words in err for words in ("changed while it was being read", "larger than 5 MiB",
                                          "holds more than 200000 values", "unknown key",
                                          "not valid YAML")), err
    assert "alias" not in err, err   # the file has none (CI, 2026-12-03: "an alias bomb?")


def test_a_file_of_too_many_plain_values_is_refused_without_blaming_aliases(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text("cluster_name: long\n" + "".join(f"k{n}: {n}\n" for n in range(200_001)))
    err = refused(orchestrate("validate", str(path)), path, "")
    assert "holds more than 200000 values" in err and "alias" not in err, err


def test_a_200_mb_file_is_refused_without_being_read(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:  # sparse: 200 MB long, no disk used
        handle.truncate(200 * 10**6)
    refused(orchestrate("validate", str(path)), path, "larger than 5 MiB (200,000,000 bytes)")
    refused(orchestrate("render", str(path)), path, "larger than 5 MiB")


def test_a_file_changed_under_the_reader_is_refused(tmp_path, monkeypatch):
    """The loader itself: a write between its two looks at the file is reported as such."""
    from orchestrator import yamlload
    from orchestrator.errors import SpecError

    path = tmp_path / "c.yaml"
    path.write_text("cluster_name: c\n")
    real_read, appended = os.read, []

    def read_then_append(fd, size):
        data = real_read(fd, size)
        if data and not appended:  # another process writes, once, while the loader reads
            appended.append(True)
            with path.open("a") as handle:
                handle.write("more: 1\n")
        return data

    monkeypatch.setattr(yamlload.os, "read", read_then_append)
    with pytest.raises(SpecError, match="the file changed while it was being read"):
        yamlload.load_file(path)


def test_no_path_at_all_is_bad_usage():
    result = orchestrate("validate")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "the following arguments are required: PATH" in result.stderr
