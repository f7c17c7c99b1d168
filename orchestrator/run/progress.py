"""What `orchestrate run` shows while it follows a job.

Every line of the job's log goes to a file (`log_path`, 0600, secrets hidden). On the screen:
    verbose   every line, as Ray prints it, epochs as `» epoch 3/5  loss 0.41 ...`
    lines     only those epoch lines (and one per change of a Tune trial's state): CI's logs
    live      the same lines, under a status line redrawn in place: the epoch (i/N) or the
              trials' states, the time so far and an estimate of what is left; at a terminal
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from .. import contract, trainers

VERBOSE, LINES, LIVE = "verbose", "lines", "live"
SHOWN = ("loss", "accuracy", "train_loss")   # first in an epoch's line, when reported
FINISHED = ("TERMINATED", "ERROR")


def total_epochs(config: Mapping[str, Any]) -> int | None:
    """How many epochs (boosting rounds) each run or trial reports, when the config says."""
    return trainers.get(config["trainer"]).total_epochs(config)


def clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def metrics_text(row: Mapping[str, Any], limit: int = 6) -> str:
    keys = [k for k in SHOWN if k in row]
    keys += [k for k in row if k not in keys and k not in ("epoch", "checkpoint", "trial")
             and not k.startswith("_")]   # not metrics: e.g. when the report came
    return "  ".join(f"{k} {row[k]:.4g}" if isinstance(row[k], float) else f"{k} {row[k]}"
                     for k in keys[:limit])


def epoch_text(row: Mapping[str, Any], epochs: int | None = None, count: int | None = None) -> str:
    """`» [trial T  ]epoch 3/5  loss 0.41  accuracy 0.87 ...`; `count`: the epoch's number when
    the row has none (XGBoost's rounds)."""
    number = row.get("epoch", count if count is not None else "?")
    prefix = f"trial {row['trial']}  " if row.get("trial") else ""
    return f"» {prefix}epoch {number}{f'/{epochs}' if epochs else ''}  {metrics_text(row)}"


class Display:
    def __init__(self, mode: str, *, epochs: int | None, log_path: Path,
                 hide: Callable[[str], str], out: IO[str] | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.mode, self.epochs, self.hide, self.now = mode, epochs, hide, now
        self.log_path = log_path
        self.out = out or sys.stderr
        log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Following a job streams its log from the start: each follow writes it whole.
        descriptor = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)   # also when an earlier file was left wider
        self.log = os.fdopen(descriptor, "w", encoding="utf-8")
        self.started = now()
        self.epoch_times: list[float] = []          # when each epoch line arrived
        self.done: dict[str, int] = {}              # trial ("" outside Tune) -> epochs seen
        self.trials: dict[str, dict[str, Any]] = {}  # trial -> its latest state line
        self.status_shown = False

    def on_line(self, line: str) -> None:
        line = self.hide(line)
        self.log.write(line + "\n")
        row = contract.parse_epoch(line)
        trial = contract.parse_trial(line)
        if row is not None:
            self._epoch(row)
        elif trial is not None:
            self._trial(trial)
        elif self.mode == VERBOSE and not contract.is_result_line(line):
            self._print(line)
        if self.mode == LIVE:
            self._status()

    def _epoch(self, row: dict[str, Any]) -> None:
        trial = str(row.get("trial") or "")
        epoch = row.get("epoch")   # a resumed run starts past 1
        self.done[trial] = epoch if isinstance(epoch, int) and epoch > 0 else \
            self.done.get(trial, 0) + 1
        self.epoch_times.append(self.now())
        self._print(epoch_text(row, self.epochs, self.done[trial]))

    def _trial(self, state: dict[str, Any]) -> None:
        trial = str(state.get("trial"))
        before = self.trials.get(trial, {}).get("state")
        self.trials[trial] = state
        if state.get("state") != before and (self.mode != LIVE or state.get("state") in FINISHED):
            params = "  ".join(f"{k.rsplit('.', 1)[-1]}={v}"
                               for k, v in (state.get("config") or {}).items())
            self._print(f"trial {trial}  {str(state.get('state')).lower()}  {params}".rstrip())

    def note(self, text: str) -> None:
        """A word from orchestrate itself (not the job's log), shown in every mode."""
        self._print(text)

    def _print(self, text: str) -> None:
        self._clear()
        print(text, file=self.out, flush=True)

    def _clear(self) -> None:
        if self.status_shown:
            self.out.write("\r\x1b[K")
            self.status_shown = False

    def status_text(self) -> str:
        elapsed = self.now() - self.started
        parts = []
        if self.trials:
            states: dict[str, int] = {}
            for state in self.trials.values():
                name = str(state.get("state", "")).lower()
                states[name] = states.get(name, 0) + 1
            parts.append("trials " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
        elif self.done:
            parts.append(f"epoch {sum(self.done.values())}" + (f"/{self.epochs}" if self.epochs else ""))
        else:
            parts.append("starting")
        parts.append(f"{clock(elapsed)} elapsed")
        left = self.left()
        if left is not None:
            parts.append(f"about {clock(left)} left")
        return " · ".join(parts)

    def left(self) -> float | None:
        """Seconds still to go, from the pace of the epochs so far (None: not known yet)."""
        if not self.epochs or not self.epoch_times:
            return None
        runs = max(len(self.trials), 1)
        remaining = runs * self.epochs - sum(self.done.values())
        if len(self.trial_states("terminated", "error")) == len(self.trials) > 0 or remaining <= 0:
            return 0.0
        times = self.epoch_times
        pace = ((times[-1] - times[0]) / (len(times) - 1) if len(times) > 1
                else times[0] - self.started)
        parallel = max(len(self.trial_states("running")), 1)
        return remaining * pace / parallel

    def trial_states(self, *names: str) -> list[str]:
        return [t for t, s in self.trials.items() if str(s.get("state", "")).lower() in names]

    def _status(self) -> None:
        import shutil

        width = shutil.get_terminal_size().columns - 1  # one row: "\r" reaches back only that far
        self.out.write("\r\x1b[K" + self.status_text()[:width])
        self.out.flush()
        self.status_shown = True

    def close(self) -> None:
        self._clear()
        self.out.flush()
        self.log.close()
