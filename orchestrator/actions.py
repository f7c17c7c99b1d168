"""The one vocabulary of changes: what `up`, `down`, `plan` and `apply` decide to do to a cluster
or an experiment, with every word people and programs read for it.

    Action.CREATE.value == "create"        the word plans show (`up --format json`, plan files)
    Action.CREATE.done == "created"        what `up` reports it did
    Action.CREATE.symbol == "+"            the mark in a project's plan
    Action.CREATE.group == "create"        the count it falls in ("Plan: 1 to create, ...")

Clusters: create, no-op, update, restart, replace, destroy (`cluster.plan` decides). Experiments
of a project: submit, no-op, resubmit, stop, forget (`gitops.planner` decides). A destroyed
cluster is shown as "delete", the word of plan files.
"""
from __future__ import annotations

from enum import Enum


class Action(str, Enum):
    CREATE = "create"
    NOOP = "no-op"
    UPDATE = "update"
    RESTART = "restart"
    REPLACE = "replace"
    DESTROY = "delete"
    SUBMIT = "submit"
    RESUBMIT = "resubmit"
    STOP = "stop"
    FORGET = "forget"

    def __str__(self) -> str:
        return self.value

    @property
    def done(self) -> str:
        """The past tense, for what was done."""
        return _DONE[self]

    @property
    def destructive(self) -> bool:
        """Running jobs die (a resubmit is destructive only while its earlier job runs)."""
        return self in (Action.RESTART, Action.REPLACE, Action.DESTROY, Action.STOP)

    @property
    def symbol(self) -> str:
        return _SYMBOLS[self]

    @property
    def group(self) -> str:
        """create | update | delete | unchanged: the plan's summary counts."""
        return _GROUPS[self]


_DONE = {Action.CREATE: "created", Action.NOOP: "unchanged", Action.UPDATE: "updated",
         Action.RESTART: "restarted", Action.REPLACE: "replaced", Action.DESTROY: "deleted",
         Action.SUBMIT: "submitted", Action.RESUBMIT: "resubmitted", Action.STOP: "stopped",
         Action.FORGET: "forgotten"}
_SYMBOLS = {Action.CREATE: "+", Action.SUBMIT: "+", Action.UPDATE: "~", Action.RESUBMIT: "~",
            Action.RESTART: "!", Action.REPLACE: "-/+", Action.DESTROY: "-", Action.STOP: "-",
            Action.FORGET: "-", Action.NOOP: " "}
_GROUPS = {Action.CREATE: "create", Action.SUBMIT: "create", Action.UPDATE: "update",
           Action.RESTART: "update", Action.REPLACE: "update", Action.RESUBMIT: "update",
           Action.DESTROY: "delete", Action.STOP: "delete", Action.FORGET: "delete",
           Action.NOOP: "unchanged"}
GROUPS = ("create", "update", "delete", "unchanged")
