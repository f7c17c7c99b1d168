"""Polling: ask again every `interval` seconds until an answer comes or time runs out."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T | None], *, timeout: float, interval: float = 0.5) -> T | None:
    """The first answer of `check` that is not None, or None once `timeout` seconds have passed.

    `check` runs at least once, even with a timeout of 0, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer is not None:
            return answer
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(interval, left))


def until(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.5) -> bool:
    """True as soon as `predicate()` is, False if it is still false after `timeout` seconds."""
    return poll(lambda: True if predicate() else None, timeout=timeout, interval=interval) is True
