"""Hands on the SSH test cluster (issue 16): `exec`, `rsync-up`/`rsync-down`, `attach` through a
pseudo-terminal, and `dashboard` in a real headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium), all as a user runs them: the `orchestrate` CLI in a
subprocess with the cluster's ORCHESTRATE_HOME."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.util.waiting import until
from tests.helpers import at_terminal, chromium, read_json_object, stop

pytestmark = [pytest.mark.ssh, pytest.mark.ray, pytest.mark.xdist_group("shared_cluster")]

REPO = Path(__file__).resolve().parents[3]
# Where screenshots are kept for a person to look at after the run (CI keeps the folder).
ARTIFACTS = Path(os.environ.get("ORCHESTRATE_TEST_ARTIFACTS", REPO / "test-artifacts"))
LOGIN_TEXT = "Token authentication is enabled"   # Ray 2.60 dashboard's login dialog


def test_exec_returns_the_remote_exit_code_and_runs_on_the_head(ssh_cluster):
    head = ssh_cluster.machine.hosts[0]
    done = ssh_cluster.cli("exec", ssh_cluster.name, "--", "hostname; exit 7")
    assert done.returncode == 7, done.stderr
    assert done.stdout.strip() == head.name
    assert "no job control" not in done.stderr and "terminal process group" not in done.stderr

    # Several words are one command, each quoted: the space and the `;` reach `printf` as text.
    done = ssh_cluster.cli("exec", "--", "printf", "%s|", "a b", "c;d")   # the only cluster
    assert (done.returncode, done.stdout) == (0, "a b|c;d|"), done.stderr

    done = ssh_cluster.cli("exec", ssh_cluster.name, "--", "false")
    assert done.returncode == 1 and done.stdout == ""

    # Bytes that are not UTF-8 on stderr pass through as they are (no traceback, no hang).
    done = subprocess.run([sys.executable, "-m", "orchestrator", "exec", ssh_cluster.name, "--",
                           r"printf 'bad \377\376 bytes\n' >&2; exit 3"], env=ssh_cluster.env,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 3 and done.stderr == b"bad \xff\xfe bytes\n", done.stderr


def test_exec_at_a_terminal_gets_one_and_ctrl_c_stops_it_off_one(ssh_cluster):
    head = ssh_cluster.machine.hosts[0]
    code, output = at_terminal([sys.executable, "-m", "orchestrator", "exec", ssh_cluster.name,
                                "--", "tty; exit 4"], ssh_cluster.env, {}, timeout=120)
    assert code == 4 and "/dev/pts/" in output, output

    # Off a terminal, Ctrl-C at the shell (SIGINT to the whole foreground group) ends ssh (it
    # must not inherit an ignored SIGINT), and a remote command that writes ends with it, as
    # under plain ssh without a TTY (the next write finds the connection gone).
    marker = f"sleep 0.{400 + os.getpid() % 100}"
    process = subprocess.Popen([sys.executable, "-m", "orchestrator", "exec", ssh_cluster.name,
                                "--", f"while true; do echo tick; {marker}; done"],
                               env=ssh_cluster.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        assert until(lambda: head.pids(marker), timeout=60), "the command never started on the head"
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode != 0
    assert until(lambda: not head.pids(marker), timeout=30), "the remote command outlived Ctrl-C"


def test_rsync_up_then_exec_cat_then_rsync_down(ssh_cluster, tmp_path):
    payload = f"from the test machine {time.time()}\n"
    (tmp_path / "hello.txt").write_text(payload)
    folder = f"/root/hands-{os.getpid()}"
    target = f"{folder}/hello.txt"
    # As `ray rsync-up` (and rsync): the folder on the head must exist; rsync's reason is shown.
    done = ssh_cluster.cli("rsync-up", ssh_cluster.name, str(tmp_path / "hello.txt"), target)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f'"{folder}" failed: No such file or directory' in done.stderr, done.stderr

    assert ssh_cluster.cli("exec", ssh_cluster.name, "--", "mkdir", folder).returncode == 0
    done = ssh_cluster.cli("rsync-up", ssh_cluster.name, str(tmp_path / "hello.txt"), target)
    assert done.returncode == 0, done.stderr + rsync_log(ssh_cluster)
    assert f"to {ssh_cluster.name}:{target}" in done.stderr

    seen = ssh_cluster.cli("exec", ssh_cluster.name, "--", "cat", target)
    assert (seen.returncode, seen.stdout) == (0, payload), seen.stderr

    written = ssh_cluster.cli("exec", ssh_cluster.name, "--", f"echo made on the head > {target}")
    assert written.returncode == 0, written.stderr
    back = tmp_path / "back" / "hello.txt"
    back.parent.mkdir()
    done = ssh_cluster.cli("rsync-down", str(ssh_cluster.file), target, str(back))  # by its file
    assert done.returncode == 0, done.stderr
    assert back.read_text() == "made on the head\n"

    missing = ssh_cluster.cli("rsync-up", ssh_cluster.name, str(tmp_path / "nope"), target)
    assert missing.returncode == 1 and "no such file or folder here" in missing.stderr
    assert "Traceback" not in missing.stderr
    failed = ssh_cluster.cli("rsync-down", ssh_cluster.name, "/nonexistent/file", str(back))
    assert failed.returncode == 1 and "`ray rsync-down` failed" in failed.stderr, failed.stderr
    assert "Traceback" not in failed.stderr


def test_attach_runs_a_shell_on_the_head(ssh_cluster):
    head = ssh_cluster.machine.hosts[0]
    code, output = at_terminal(
        [sys.executable, "-m", "orchestrator", "attach", ssh_cluster.name], ssh_cluster.env,
        {"# ": 'echo "MARK-$(hostname)-END"; exit'}, timeout=120)
    assert code == 0, output
    assert f"MARK-{head.name}-END" in output, output

    # Not at a terminal: a clear refusal, not a hung shell.
    done = ssh_cluster.cli("attach", ssh_cluster.name)
    assert done.returncode == 1 and "attach needs a terminal" in done.stderr


def test_dashboard_signs_a_browser_in_without_the_token_typed(ssh_cluster, tmp_path):
    """The page at the printed URL shows the cluster's nodes in a real browser that opened only
    the link `orchestrate dashboard` gave it (through $BROWSER, as the system browser would);
    a fresh browser at the same URL gets Ray's login dialog instead; the link works once."""
    from orchestrator.util.ports import free_port, is_free

    opened = tmp_path / "opened-urls"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" >> {opened}\n')
    browser.chmod(0o755)
    port = free_port()
    env = {k: v for k, v in ssh_cluster.env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "dashboard", ssh_cluster.name, "--port", str(port),
         "--format", "json"], env={**env, "BROWSER": f"{browser} %s"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        report = read_json_object(process)
        assert report["url"] == f"http://127.0.0.1:{port}" and report["browser"] == "opening"
        assert until(opened.exists, timeout=10)
        sign_in = opened.read_text().split()[0]
        assert sign_in == report["sign_in_url"] and sign_in.startswith("http://127.0.0.1:")

        status = json.loads(ssh_cluster.cli("status", ssh_cluster.name, "--format", "json").stdout)
        nodes = status[0]["live"]["nodes_alive"]
        ips = ssh_cluster.machine.ips
        assert nodes == len(ips) == 3

        with chromium(tmp_path / "profile-a") as signed_in:
            signed_in.get(sign_in)
            assert until(lambda: signed_in.current_url.startswith(report["url"]), timeout=30)
            signed_in.get(report["url"] + "/#/cluster")
            # The node list and the page's own count (its "Node Statistics") arrive separately.
            shown = wait_for_text(signed_in, lambda text: all(ip in text for ip in ips)
                                  and f"ALIVE x {nodes}" in " ".join(text.split()), 120)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / "dashboard-ssh-cluster.png"
            signed_in.save_screenshot(str(shot))
            assert shot.stat().st_size > 10_000
            assert LOGIN_TEXT not in shown
            assert sum(shown.count(ip) >= 1 for ip in ips) == nodes
            # The cookie is Ray's HttpOnly one: the page's scripts cannot read the token.
            assert ssh_cluster.token not in signed_in.execute_script("return document.cookie")

        with chromium(tmp_path / "profile-b") as fresh:
            fresh.get(report["url"] + "/#/cluster")
            shown = wait_for_text(fresh, lambda text: LOGIN_TEXT in text, 60)
            fresh.save_screenshot(str(ARTIFACTS / "dashboard-without-sign-in.png"))
            assert not any(ip in shown for ip in ips), shown
            fresh.get(sign_in)                                  # spent by the first browser
            assert "used already" in fresh.find_element("tag name", "body").text
            assert not fresh.current_url.startswith(report["url"])
    finally:
        out, err = stop(process, signal.SIGTERM)
    assert process.returncode == 143, err                # SIGTERM: closed, as after Ctrl-C
    assert "a browser signed in" in err
    assert ssh_cluster.token not in out + err + opened.read_text()
    assert until(lambda: is_free(port), timeout=10), "the forward outlived `orchestrate dashboard`"


def test_dashboard_ends_when_its_forward_dies(ssh_cluster):
    from orchestrator.util.ports import free_port

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "dashboard", ssh_cluster.name, "--port", str(port),
         "--no-browser", "--format", "json"], env=ssh_cluster.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert read_json_object(process)["browser"] == "--no-browser"
        # the forward's ssh: a child of the command (it listens on a Unix socket, not the port)
        pids = subprocess.run(["pgrep", "-P", str(process.pid), "-x", "ssh"], capture_output=True,
                              text=True).stdout
        assert len(pids.split()) == 1, pids
        os.kill(int(pids), signal.SIGKILL)          # as when the network drops the connection
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            stop(process, signal.SIGINT)
    err = process.stderr.read()
    assert process.returncode == 1
    assert "the SSH forward to the head closed" in err and "Traceback" not in err


def test_dashboard_refuses_a_port_that_is_taken(ssh_cluster):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = ssh_cluster.cli("dashboard", ssh_cluster.name, "--port", str(port), "--no-browser",
                               timeout=60)
    assert done.returncode == 1
    assert f"local port {port} is taken" in done.stderr and "--port" in done.stderr




def rsync_log(cluster) -> str:
    log = cluster.home / "clusters" / cluster.name / "rsync.log"
    return log.read_text()[-3000:] if log.exists() else ""




def wait_for_text(driver, wanted, timeout: float) -> str:
    """The page's visible text once `wanted(text)` holds; AssertionError with it if not."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = driver.find_element("tag name", "body").text
        except Exception:  # noqa: BLE001 - the page is being replaced; try again
            text = ""
        if wanted(text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"the page did not show what was expected in {timeout} s:\n{text[:2000]}")
