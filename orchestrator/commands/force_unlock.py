"""orchestrate force-unlock LOCK_ID: remove the state's lock left by a command that died.

Needs the lock's id (an error naming the holder shows it), so a lock taken since is never
removed by mistake.
"""
from __future__ import annotations

import argparse

from ..output import info
from .plan import add_project_argument, open_project


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("lock_id", metavar="LOCK_ID",
                        help="the lock's id, as the command it stopped printed it (lock id ...)")
    add_project_argument(parser)
    parser.set_defaults(paths=[])


def run(args: argparse.Namespace) -> int:
    ps = open_project(args)
    holder = ps.backend.force_release(args.lock_id)
    info(f"removed the lock of {holder.describe()} from {ps.backend.url} (project "
         f"{ps.project.name} from {ps.project.file})")
    return 0
