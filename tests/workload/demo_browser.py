"""The demo page (`demo: true`, a Gradio app) as a user meets it: `orchestrate demo NAME` run as
a command, its one-time link opened in Debian's headless Chromium, the page's own form or image
upload used, and what its label shows held to `POST {route}/predict` for the same input. Used by
test_demo_page.py (the page without Ray), test_serve.py (the session's XGBoost run) and
test_predict.py (a small ViT), on the Serve applications those tests deploy anyway."""
from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers import chromium, read_json_object, stop

SHOTS = Path(os.environ.get("ORCHESTRATE_TEST_ARTIFACTS",
                            Path(__file__).resolve().parents[2] / "test-artifacts"))

# Each form field's value by its elem_id (`demo_app.element_id`).
FIELDS = """
const fields = {};
for (const block of document.querySelectorAll('[id^="field-"]')) {
  const input = block.querySelector('input, textarea');
  if (input) fields[block.id] = input.value;
}
return fields;
"""


def status_of(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    request = urllib.request.Request(url, headers=headers or {}, method=method,
                                     data=b"[]" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def wait_for(driver: Any, script: str, timeout: float = 90) -> Any:
    """The value of `script` in the page once it is truthy; AssertionError with the page's text."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"the page did not get there in {timeout} s:\n"
                         f"{driver.find_element('tag name', 'body').text[:2000]}")


def label_of(driver: Any) -> dict[str, float]:
    """gr.Label's classes and confidences (0..1) as shown, once it shows a prediction."""
    text = wait_for(driver, """
        const label = document.getElementById('label');
        return label && label.innerText.includes('%') ? label.innerText : null;""")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    shown: dict[str, float] = {}
    for name, value in zip(lines, lines[1:], strict=False):
        if value.endswith("%") and not name.endswith("%") and name != "prediction":
            shown[name] = round(float(value.rstrip("%")) / 100, 4)
    return shown


def fields_of(driver: Any) -> dict[str, str]:
    """Each form field's value by its elem_id, once the form is there."""
    wait_for(driver, "return document.getElementById('predict')")
    return driver.execute_script(FIELDS)  # type: ignore[no-any-return]


def predict_with(driver: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The form's fields set to `values` (the others as prefilled), typed in as a person would,
    Predict clicked; the fields as they were and the label it then shows."""
    from orchestrator.workload.demo_app import element_id

    fields = fields_of(driver)
    for column, value in values.items():
        box = driver.find_element("css selector", f'#{element_id(column)} input, '
                                                  f'#{element_id(column)} textarea')
        box.clear()
        box.send_keys(str(value))
    driver.find_element("id", "predict").click()
    return {"fields": fields, "label": label_of(driver)}


def same_answer(shown: dict[str, float], predicted: dict[str, Any], top: int | None = None) -> None:
    """The label's classes and percentages are the API's probabilities, as gr.Label rounds
    them (whole percents)."""
    scores = sorted(((v, k.removeprefix("probability_")) for k, v in predicted.items()
                     if k.startswith("probability_")), reverse=True)[:top]
    assert list(shown) == [name for _, name in scores], (shown, scores)
    for value, name in scores:
        assert abs(shown[name] - value) <= 0.005 + 1e-9, (name, shown[name], value)


def loopback_only(driver: Any) -> list[str]:
    """Every URL the browser asked for (Chromium's performance log) went to loopback; those
    URLs."""
    asked = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            asked.append(message["params"]["request"]["url"])
    web = [u for u in asked if urllib.parse.urlsplit(u).scheme in ("http", "https", "ws", "wss")]
    assert web, asked
    for url in web:
        host = urllib.parse.urlsplit(url).hostname or ""
        assert host == "localhost" or ipaddress.ip_address(host).is_loopback, url
    return web


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
        assert report["url"].endswith("/demo/")
        with chromium(profile) as driver:
            driver.get(report["sign_in_url"])
            wait_for(driver, "return document.getElementById('predict')")
            assert driver.current_url == report["url"]
            # the cookie is HttpOnly: the page's scripts cannot read it; the token is nowhere
            assert token is not None and token not in driver.execute_script(
                "return document.cookie") and token not in driver.page_source
            (cookie,) = driver.get_cookies()
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert cookie["name"] == "orchestrate-demo" and token not in cookie["value"]
            assert cookie["path"] == "/" + report["url"].split("/", 3)[3].rstrip("/")
            yield driver, report
            loopback_only(driver)
    finally:
        out, err = stop(process, signal.SIGTERM)
    assert process.returncode == 143, err
    assert "a browser signed in" in err and token not in out + err


def refused(url: str, name: str, sign_in_url: str, profile: Path) -> None:
    """A browser without the token: the page answers 401 with a note on signing in; the link
    spent by the first browser does not sign it in."""
    assert status_of(url + "/demo/") == 401
    with chromium(profile) as fresh:
        fresh.get(url + "/demo/")
        text = fresh.find_element("tag name", "body").text
        assert f"orchestrate demo {name}" in text and "not signed in" in text
        assert not fresh.find_elements("id", "predict")
        fresh.get(sign_in_url)
        assert "used already" in fresh.find_element("tag name", "body").text
        fresh.get(url + "/demo/")
        assert not fresh.find_elements("id", "predict")


def screenshot(driver: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    shot = SHOTS / name
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    return shot
