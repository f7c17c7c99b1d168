"""Command-line entry point: argument parsing and the one place errors become exit codes.

Each verb is a module under `orchestrator.commands` with `add_arguments(parser)` and
`run(args) -> int`, listed with its help in `COMMANDS`. Command modules import only light modules
at top level; Ray, torch and the cloud SDKs are imported inside the functions that use them, so
the CLI starts fast. Exit codes: 0 done, 1 a problem the user can fix (`OrchestrateError`),
2 bad usage (argparse), 3 a bug (a crash log is written), 130 Ctrl-C, 143 SIGTERM while a
lock was held.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .errors import OrchestrateError, SpecError, Terminated

# The registry: verb -> (module, one-line help). Order is the order shown in --help.
# Only the chosen verb's module is imported, so `validate` never pays for `run`'s imports.
COMMANDS = {
    "validate": ("orchestrator.commands.validate",
                 "check cluster and experiment files (and folders of them); launches nothing"),
    "render": ("orchestrator.commands.render",
               "print the Ray cluster YAML `ray up` gets, or the job `run` submits"),
    "schema": ("orchestrator.commands.schema",
               "print a file kind's JSON schema, or write them all for an editor"),
    "check": ("orchestrator.commands.check",
              "preflight: credentials, regions, zones, instance types, images, quotas"),
    "up": ("orchestrator.commands.up", "launch or update a cluster from its YAML (idempotent)"),
    "status": ("orchestrator.commands.status", "known clusters and their live health"),
    "down": ("orchestrator.commands.down", "tear a cluster down and forget it"),
    "run": ("orchestrator.commands.run", "run an experiment as a Ray job and follow it"),
    "jobs": ("orchestrator.commands.jobs", "list the jobs of a cluster"),
    "logs": ("orchestrator.commands.logs", "print or follow a job's logs"),
    "stop": ("orchestrator.commands.stop", "stop a running job"),
    "profile": ("orchestrator.commands.profile",
                "a running job's workers: CPU flame graphs and stacks, written to files"),
    "dashboard": ("orchestrator.commands.dashboard",
                  "Ray's dashboard in your browser, signed in (a forward until Ctrl-C)"),
    "attach": ("orchestrator.commands.attach", "an interactive shell on a cluster's head"),
    "exec": ("orchestrator.commands.exec",
             "run a command on a cluster's head (exit code: the command's)"),
    "known-hosts": ("orchestrator.commands.known_hosts",
                    "the host keys pinned for a cluster; --accept HOST pins a new one on purpose"),
    "rsync-up": ("orchestrator.commands.rsync", "copy local files to a cluster's head"),
    "rsync-down": ("orchestrator.commands.rsync", "copy files from a cluster's head here"),
    "runs": ("orchestrator.commands.runs", "the runs submitted from here, newest first"),
    "results": ("orchestrator.commands.results",
                "a run's metrics, best checkpoint and plot; several runs side by side"),
    "predict": ("orchestrator.commands.predict",
                "batch prediction with a run's checkpoint over a dataset, as a Ray job"),
    "serve": ("orchestrator.commands.serve",
              "serve a run's checkpoint over HTTP with Ray Serve (a service file); --status"),
    "unserve": ("orchestrator.commands.unserve", "remove one service's Serve application"),
    "demo": ("orchestrator.commands.demo",
             "a served model's demo page in your browser, signed in (`demo: true`; until Ctrl-C)"),
    "prices": ("orchestrator.commands.prices",
               "refresh: fetch the full public price catalog into this machine's cache"),
    "plan": ("orchestrator.commands.plan",
             "what apply would change in a project (clusters and experiments), and why"),
    "apply": ("orchestrator.commands.apply", "carry out a project's plan under its state lock"),
    "show": ("orchestrator.commands.show", "print a saved plan (text, json, markdown)"),
    "state": ("orchestrator.commands.state", "list, show or forget what a project's state holds"),
    "force-unlock": ("orchestrator.commands.force_unlock",
                     "remove a project's state lock left by a command that died"),
}

EXIT_BUG = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


# Options that come before the verb, and whether each takes a value. Any that takes one must be
# listed, so that the verb is found after it (`orchestrate --opt VALUE up ...`).
GLOBAL_OPTIONS = {"--version": False, "-h": False, "--help": False}


def chosen_verb(argv: list[str]) -> str | None:
    """The verb of a command line: the first word after the global options (None if absent)."""
    words = iter(argv)
    for word in words:
        if word == "--":
            break
        if word.startswith("-"):
            name, has_value = word.partition("=")[::2]
            if GLOBAL_OPTIONS.get(name) and not has_value:
                next(words, None)  # the option's value
            continue
        return word if word in COMMANDS else None
    return None


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orchestrate",
        description="Declarative Ray clusters and Ray Train experiments from YAML.",
    )
    parser.add_argument("--version", action="version", version=f"orchestrate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    chosen = chosen_verb(argv)
    # A command line with its verb needs that verb's parser alone (usage and errors are its
    # own); the others are built for `--help` (`--help run` too) and a missing or unknown verb.
    asks_help = chosen is not None and bool({"-h", "--help"} & set(argv[:argv.index(chosen)]))
    verbs = {chosen: COMMANDS[chosen]} if chosen is not None and not asks_help else COMMANDS
    for verb, (module_name, help_text) in verbs.items():
        command_parser = sub.add_parser(verb, help=help_text, description=help_text)
        if verb == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(command_parser)
            command_parser.set_defaults(_module=module)
    return parser


def _print_error(exc: OrchestrateError) -> None:
    if isinstance(exc, SpecError):
        for problem in exc.problems:
            label = "WARNING" if problem.severity == "warning" else "ERROR  "
            print(f"{label} {problem.format()}", file=sys.stderr)
        return
    print(f"ERROR {exc.message}", file=sys.stderr)
    if exc.hint:
        print(f"TIP   {exc.hint}", file=sys.stderr)


def _report_bug(argv: list[str]) -> None:
    import platform
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="orchestrate-crash-", suffix=".log")
    with os.fdopen(fd, "w") as log:
        log.write(f"orchestrate {__version__}, Python {platform.python_version()} "
                  f"({sys.executable}), {platform.platform()}\n")
        verb = chosen_verb(argv)
        log.write(f"command: orchestrate {verb or '?'} (arguments not recorded)\n\n")
        traceback.print_exc(file=log)
    print(
        f"ERROR an unexpected error occurred (a bug in orchestrate); details in {path}",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except OrchestrateError as exc:
        _print_error(exc)
        return exc.exit_code
    except Terminated:
        print("\nterminated (SIGTERM); locks held were released", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception:  # noqa: BLE001 - the last line of defence: no traceback for users
        _report_bug(argv)
        return EXIT_BUG


def entry() -> None:
    sys.exit(main())
