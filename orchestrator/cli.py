"""Command-line entry point: argument parsing and the one place errors become exit codes.

Each verb is a module under `orchestrator.commands` with `HELP`, `add_arguments(parser)` and
`run(args) -> int`. Command modules import only light modules at top level; Ray, torch and
the cloud SDKs are imported inside the functions that use them, so the CLI starts fast.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import traceback

from . import __version__
from .errors import OrchestrateError, SpecError

# The registry: verb -> module. Order is the order shown in --help.
COMMANDS = {
    "validate": "orchestrator.commands.validate",
    "render": "orchestrator.commands.render",
    "check": "orchestrator.commands.check",
    "up": "orchestrator.commands.up",
    "status": "orchestrator.commands.status",
    "down": "orchestrator.commands.down",
    "run": "orchestrator.commands.run",
    "jobs": "orchestrator.commands.jobs",
    "logs": "orchestrator.commands.logs",
    "stop": "orchestrator.commands.stop",
    "results": "orchestrator.commands.results",
}

EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_BUG = 3
EXIT_INTERRUPTED = 130


def _available_commands() -> dict:
    modules = {}
    for verb, module_name in COMMANDS.items():
        try:
            modules[verb] = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:  # a real import error inside the module: fail loudly
                raise
    return modules


def build_parser(modules: dict) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orchestrate",
        description="Declarative Ray clusters and Ray Train experiments from YAML.",
    )
    parser.add_argument("--version", action="version", version=f"orchestrate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for verb, module in modules.items():
        command_parser = sub.add_parser(verb, help=module.HELP, description=module.HELP)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def _print_error(exc: OrchestrateError) -> None:
    if isinstance(exc, SpecError):
        for problem in exc.problems:
            print(f"ERROR {problem.format()}", file=sys.stderr)
        return
    print(f"ERROR {exc.message}", file=sys.stderr)
    if exc.hint:
        print(f"TIP   {exc.hint}", file=sys.stderr)


def _report_bug() -> None:
    fd, path = tempfile.mkstemp(prefix="orchestrate-crash-", suffix=".log")
    with os.fdopen(fd, "w") as log:
        traceback.print_exc(file=log)
    print(
        f"ERROR an unexpected error occurred (a bug in orchestrate); details in {path}",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(_available_commands())
    args = parser.parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except OrchestrateError as exc:
        _print_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception:  # noqa: BLE001 - the last line of defence: no traceback for users
        _report_bug()
        return EXIT_BUG


def entry() -> None:
    sys.exit(main())
