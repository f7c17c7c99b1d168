"""`dashboard`, `attach`, `exec`, `rsync-up/down` without the SSH test hosts: how their
arguments are read, what reaches the head's shell, their refusals (unknown cluster, cluster not
up, head unreachable), and `dashboard` on the embedded local Ray with Ray's own cookie. On the
SSH hosts and in a real browser: tests/cluster/shared_cluster/test_hands.py."""
from __future__ import annotations

import http.cookiejar
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from orchestrator.cli import main
from orchestrator.cluster.remote import command_line
from orchestrator.commands.exec import split
from orchestrator.errors import ClusterError
from orchestrator.launch.ray_up.head import head_line
from orchestrator.state import FAILED, UP, ClusterRecord, State, cluster_key
from tests.helpers import read_json_object, stop

VERBS = (["exec", "{name}", "--", "true"], ["attach", "{name}"],
         ["rsync-up", "{name}", __file__, "/tmp/x"], ["rsync-down", "{name}", "/tmp/x", "here"],
         ["dashboard", "{name}", "--no-browser"])


def test_exec_reads_name_and_command():
    assert split(["c", "--", "ls", "-l"]) == ("c", ["ls", "-l"])
    assert split(["--", "ls", "--all"]) == (None, ["ls", "--all"])   # the only cluster
    assert split(["c", "uptime"]) == ("c", ["uptime"])                 # as `ray exec c CMD`
    for words, problem in ((["a", "b", "--", "ls"], "at most one cluster"), (["c", "--"], "no command"),
                           ([], "no command"), (["c", "--tmux", "--", "ls"], "options go before")):
        with pytest.raises(ClusterError, match=problem):
            split(words)
    assert command_line(["cat /x | wc -l"]) == "cat /x | wc -l"      # one word: a shell line
    assert command_line(["printf", "%s", "a b", "$HOME"]) == "printf %s 'a b' '$HOME'"


def test_the_head_line_keeps_every_character_of_the_command(tmp_path):
    """What `exec` sends is run by a shell on the head; here by a local bash, which must give
    back the hostile value untouched (quotes, `$`, `;`, backticks)."""
    hostile = "it's $HOME; `id` \"x\" \\ end"
    for config in ({}, {"docker": {"container_name": "ray_container"}}):
        line = head_line(config, command_line(["printf", "%s", hostile]), tty=False)
        if config:
            assert line.startswith("docker exec -i ray_container /bin/bash -c ")
            line = line.split(" /bin/bash -c ", 1)[1]
            line = subprocess.run(["bash", "-c", f"printf %s {line}"], capture_output=True,
                                  text=True).stdout  # the one level docker's bash unquotes
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True,
                              env={"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
        assert done.stdout == hostile, (line, done.stderr)
    assert head_line({"docker": {"container_name": "c", "use_podman": True}}, "true",
                     tty=True).startswith("podman exec -it c ")
    assert head_line({"docker": {"container_name": "c"}}, "true", tty=False,
                     in_container=False).startswith("bash --login")           # --run-env host
    # A trailing comment in a shell line does not swallow the wrapper's closing parenthesis.
    done = subprocess.run(["bash", "-c", head_line({}, "echo kept # a comment", tty=False)],
                          capture_output=True, text=True, env={"HOME": str(tmp_path)})
    assert (done.returncode, done.stdout) == (0, "kept\n"), done.stderr


def test_the_sign_in_cookie_is_rays_made_a_session_cookie():
    from orchestrator.reach.signin import session_cookie

    ray_says = "ray-authentication-token=abc.def; HttpOnly; Max-Age=2592000; Path=/; SameSite=Strict"
    handed_on = session_cookie(ray_says)
    assert handed_on.startswith("ray-authentication-token=abc.def;")
    assert "HttpOnly" in handed_on and "SameSite=Strict" in handed_on and "Path=/" in handed_on
    assert "Max-Age" not in handed_on and "expires" not in handed_on.lower()
    for odd in ("other=abc; HttpOnly; Path=/", "ray-authentication-token=abc; Path=/",
                "ray-authentication-token=abc; HttpOnly; Domain=example.com; Path=/", "garbage"):
        with pytest.raises(ClusterError, match="unexpected cookie"):
            session_cookie(odd)


def record(state: State, name: str, status: str, auth: dict | None = None) -> None:
    state.store.write_cluster(ClusterRecord(name=name, provider="local", file=f"/nowhere/{name}.yaml",
                                            config_hash="0", state=status, head_ip="127.0.0.1",
                                            dashboard_host="127.0.0.1"))
    state.store.write_rendered(name, {"cluster_name": name, "provider": {"type": "local"},
                                      "auth": auth or {"ssh_user": "root"}})
    state.secrets.put(cluster_key(name), "t0ken-not-for-printing")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("verb", VERBS, ids=lambda verb: verb[0])
def test_unknown_and_not_up_clusters_are_refused(verb, state, capsys):
    code, _, err = run(capsys, *[w.format(name="nosuch") for w in verb])
    assert code == 1 and "no cluster 'nosuch' is recorded" in err and "Traceback" not in err

    record(state, "broken", FAILED)
    code, _, err = run(capsys, *[w.format(name="broken") for w in verb])
    assert code == 1, err
    assert "cluster 'broken' is failed, not up" in err and "orchestrate up" in err


def test_without_any_cluster(state, capsys):
    code, _, err = run(capsys, "exec", "--", "true")
    assert code == 1 and "no cluster is recorded; nothing to exec" in err
    code, _, err = run(capsys, "dashboard", "--no-browser")
    assert code == 1 and "the embedded Ray is not running" in err
    code, _, err = run(capsys, "dashboard", "some", "--local-ray")
    assert code == 1 and "not both" in err


def test_exec_in_a_container_needs_one(state, capsys):
    record(state, "plain", UP)
    code, _, err = run(capsys, "exec", "--run-env", "docker", "plain", "--", "true")
    assert code == 1 and "runs no container" in err


def test_an_unreachable_head_is_named(state, capsys):
    """A head SSH cannot reach (its proxy command fails at once: no traffic leaves this
    machine): exec and dashboard say which head and why; nothing is left running."""
    record(state, "gone", UP, {"ssh_user": "root", "ssh_proxy_command": "false"})
    code, _, err = run(capsys, "exec", "gone", "--", "true")
    assert code == 1 and "cannot reach the head 127.0.0.1 of cluster 'gone' over SSH" in err
    code, _, err = run(capsys, "dashboard", "gone", "--no-browser")
    assert code == 1 and "could not open an SSH port forward to the head 127.0.0.1" in err
    assert "t0ken-not-for-printing" not in err
    left = subprocess.run(["pgrep", "-f", "ProxyCommand=false"], capture_output=True, text=True)
    assert left.stdout.split() == [], "an ssh of the refused commands is still running"


@pytest.mark.ray
def test_dashboard_of_the_local_ray_signs_in_once_with_rays_cookie(local_ray, tmp_path):
    """No cluster recorded: `dashboard` is the local Ray's. Without a display it opens no
    browser and prints the one-time link; following it (with a cookie jar, as a browser would)
    lands on the dashboard with Ray's own cookie, which then opens Ray's API; the link is spent;
    the token is printed nowhere."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    process = subprocess.Popen([sys.executable, "-m", "orchestrator", "dashboard", "--format", "json"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
    token = State.here().secrets.read("local-ray")
    try:
        report = read_json_object(process)
        assert report["url"] == local_ray.address and report["target"] == "the embedded Ray"
        assert report["browser"].startswith("not opened: no display")

        # Two browsers open the link at once: one is signed in, the other told it was used.
        jars = [http.cookiejar.CookieJar() for _ in range(2)]
        browsers = [urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
                    for jar in jars]

        def follow(browser) -> object:
            try:
                with browser.open(report["sign_in_url"], timeout=30) as landed:
                    return landed.url
            except urllib.error.HTTPError as exc:
                return exc.code

        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(follow, browsers))
        assert sorted(map(str, outcomes)) == ["410", local_ray.address + "/"], outcomes
        winner = outcomes.index(local_ray.address + "/")
        browser, jar = browsers[winner], jars[winner]
        assert not list(jars[1 - winner])
        cookie = next(c for c in jar if c.name == "ray-authentication-token")
        assert cookie.expires is None                                    # a session cookie
        assert cookie.has_nonstandard_attr("HttpOnly")
        with browser.open(local_ray.address + "/api/jobs/", timeout=30) as answer:
            assert answer.status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:   # no cookie, no header: refused
            urllib.request.urlopen(local_ray.address + "/api/jobs/", timeout=30)
        assert refused.value.code == 401
        wrong = report["sign_in_url"][:-4] + "AAAA"
        with pytest.raises(urllib.error.HTTPError) as unknown:
            urllib.request.urlopen(wrong, timeout=30)
        assert unknown.value.code == 404
    finally:
        out, err = stop(process, signal.SIGINT)
    assert process.returncode == 0, err
    assert "a browser signed in" in err and "sign a browser in once with" in err
    assert token not in out + err




@pytest.mark.ray
def test_the_sign_in_link_refuses_another_users_connection(local_ray):
    """The link reaches the browser on its command line, which every local user can read: a
    connection of another user (uid nobody, through Debian's own python3) gets 403 and does
    not spend it; ours then does."""
    from orchestrator.reach.signin import SignIn
    from tests import prerequisites

    prerequisites.require()   # root, to connect as another user (fails naming it, never skips)
    endpoint = local_ray.endpoint(State.here().secrets)
    with SignIn(endpoint.address, endpoint.token) as signin:
        fetch = ("import urllib.request, urllib.error, sys\n"
                 "try:\n    urllib.request.urlopen(sys.argv[1], timeout=10); print(200)\n"
                 "except urllib.error.HTTPError as e:\n    print(e.code)\n")
        other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                "/usr/bin/python3", "-c", fetch, signin.url],
                               capture_output=True, text=True, timeout=60, cwd="/")
        assert other.stdout.strip() == "403", other.stderr
        assert not signin.spent
        ours = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with ours.open(signin.url, timeout=10) as landed:
            assert landed.status == 200
        assert signin.spent
