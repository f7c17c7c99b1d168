"""orchestrate exec [NAME] -- CMD...: run a command on the cluster's head; its exit code.

One word after `--` is a shell command line (as `ray exec` takes it: pipes and `;` work); several
are the words of one command, each quoted (as `docker exec` takes them). Without `--`, the first
word is the cluster."""
from __future__ import annotations

import argparse

from ..errors import ClusterError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-env", choices=("auto", "host", "docker"), default="auto",
                        help="where on the head, as `ray exec --run-env`: auto (in the container "
                             "when the cluster has docker:), host, docker")
    parser.add_argument("words", nargs=argparse.REMAINDER, metavar="[NAME] -- CMD...",
                        help="the cluster (default: the only one recorded), then the command")


def split(words: list[str]) -> tuple[str | None, list[str]]:
    """`[NAME] -- CMD...` or `NAME CMD...` into (NAME or None, CMD words)."""
    if "--" in words:
        at = words.index("--")
        before, command = words[:at], words[at + 1:]
    else:
        before, command = words[:1], words[1:]
    if any(word.startswith("-") for word in before):
        raise ClusterError(f"options go before the cluster's name: {' '.join(before)}",
                           hint="orchestrate exec [--run-env ENV] [NAME] -- CMD...")
    if len(before) > 1:
        raise ClusterError(f"expected at most one cluster before `--`, got {' '.join(before)}",
                           hint="orchestrate exec [NAME] -- CMD...")
    if not command:
        raise ClusterError("no command to run", hint="orchestrate exec [NAME] -- CMD...")
    return (before[0] if before else None), command


def run(args: argparse.Namespace) -> int:
    from ..cluster.remote import command_line, exec_on_head
    from ..reach import pick
    from ..state import State

    name, command = split(args.words)
    state = State.here()
    record = pick.named_or_only(name, state, "exec")
    return exec_on_head(record, state, command_line(command), in_container=args.run_env != "host",
                        container_required=args.run_env == "docker")
