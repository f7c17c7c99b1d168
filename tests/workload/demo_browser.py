"""The demo page (`demo: true`) as a user meets it: `orchestrate demo NAME` run as a command, its
one-time link opened in Debian's headless Chromium, the page's own form or file input used, and
what it shows held to `POST {route}/predict` for the same input. Used by test_serve.py (the
session's XGBoost run) and test_predict.py (a small ViT), on the Serve applications those tests
deploy anyway."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers import chromium, read_json_object, stop

SHOTS = Path(os.environ.get("ORCHESTRATE_TEST_ARTIFACTS",
                            Path(__file__).resolve().parents[2] / "test-artifacts"))

SHOWN = """
const rows = [...document.querySelectorAll('.class-row')];
return {prediction: document.getElementById('prediction').dataset.value,
        classes: rows.map(r => [JSON.parse(r.dataset.class), Number(r.dataset.probability)])};
"""


def status_of(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    request = urllib.request.Request(url, headers=headers or {}, method=method,
                                     data=b"[]" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_for(driver: Any, script: str, timeout: float = 60) -> Any:
    """The value of `script` in the page once it is truthy; AssertionError with the page's text."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"the page did not get there in {timeout} s:\n"
                         f"{driver.find_element('tag name', 'body').text[:2000]}")


def answered(driver: Any, count: int) -> dict[str, Any]:
    """What the page shows once its `count`-th prediction came back."""
    wait_for(driver, f"return document.getElementById('status').dataset.done === '{count}' "
                     f"|| document.getElementById('status').className.includes('error')")
    status = driver.find_element("id", "status")
    assert "error" not in (status.get_attribute("class") or ""), status.text
    return driver.execute_script(SHOWN)  # type: ignore[no-any-return]


def same_answer(shown: dict[str, Any], predicted: dict[str, Any], top: int | None = None) -> None:
    """The page's prediction and class probabilities are the API's, digit for digit."""
    assert json.loads(shown["prediction"]) == predicted["prediction"]
    scores = sorted(((v, int(k.removeprefix("probability_"))) for k, v in predicted.items()
                     if k.startswith("probability_")), reverse=True)
    expected = [[name, p] for p, name in scores[:top]]
    assert shown["classes"] == expected


@contextlib.contextmanager
def signed_in(name: str, token: str | None, profile: Path) -> Iterator[tuple[Any, dict]]:
    """`orchestrate demo NAME` running, a browser signed in through its link and on the page;
    afterwards the command stopped (as by Ctrl-C) and its output checked for the token."""
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "demo", name, "--no-browser", "--format", "json"],
        env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    out = err = ""
    try:
        report = read_json_object(process)
        assert report["browser"] == "--no-browser" and report["service"] == name
        assert report["sign_in_url"].startswith("http://127.0.0.1:")
        with chromium(profile) as driver:
            driver.get(report["sign_in_url"])
            wait_for(driver, "return document.getElementById('input')"
                             " && document.getElementById('input').children.length > 0")
            assert driver.current_url == report["url"]
            # the cookie is HttpOnly: the page's scripts cannot read the token
            assert token is not None and token not in driver.execute_script(
                "return document.cookie")
            (cookie,) = driver.get_cookies()
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert cookie["name"] == "orchestrate-demo" and token not in cookie["value"]
            assert cookie["path"] == "/" + report["url"].split("/", 3)[3]   # the page's only
            yield driver, report
    finally:
        out, err = stop(process, signal.SIGTERM)
    assert process.returncode == 143, err
    assert "a browser signed in" in err and token not in out + err


def refused(url: str, name: str, sign_in_url: str, profile: Path) -> None:
    """A browser without the token: the page answers 401 with a note on signing in; the link
    spent by the first browser does not sign it in."""
    assert status_of(url + "/demo") == 401
    with chromium(profile) as fresh:
        fresh.get(url + "/demo")
        text = fresh.find_element("tag name", "body").text
        assert f"orchestrate demo {name}" in text and "not signed in" in text
        assert not fresh.find_elements("id", "input")
        fresh.get(sign_in_url)
        assert "used already" in fresh.find_element("tag name", "body").text
        fresh.get(url + "/demo")
        assert not fresh.find_elements("id", "input")


def screenshot(driver: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / name
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    return shot
