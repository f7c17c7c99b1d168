"""Write every command's usage and options into docs/commands.md from the CLI's own parser, so
the reference cannot drift from what `orchestrate VERB --help` says.

The reference goes between two marker comments:

    <!-- commands begin -->
    (generated: one section per verb, its usage line and a table of its arguments)
    <!-- commands end -->

The output depends only on the parser (same code, same bytes; the terminal's width does not
matter: the usage is joined into one line).

    python scripts/command_docs.py          # rewrite the reference
    python scripts/command_docs.py --check  # exit 1 if it is stale
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "commands.md"
COMMAND = "python scripts/command_docs.py"
MARKERS = re.compile(r"(<!-- commands begin -->\n)(?P<body>.*?)(<!-- commands end -->)", re.DOTALL)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _parser(verb: str) -> argparse.ArgumentParser:
    from orchestrator import cli

    parser = cli.build_parser([verb])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = sub.choices[verb]
    return chosen


def _names(action: argparse.Action) -> str:
    if not action.option_strings:
        name = action.metavar or (
            "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest)
        return f"`{name}`" + (" ..." if action.nargs in ("+", "*") else "")
    shown = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{shown}`"
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return f"`{shown} {metavar}`"


def _default(action: argparse.Action) -> str:
    unset = action.default is None or action.default is argparse.SUPPRESS or \
        action.default is False or action.default == []    # not 0: `--gpus 0` is a default
    if action.nargs == 0 or unset or "default" in (action.help or ""):
        return ""
    return f"`{action.default}`"


def section(verb: str, help_text: str) -> str:
    parser = _parser(verb)
    parser.prog = f"orchestrate {verb}"
    usage = " ".join(parser.format_usage().removeprefix("usage: ").split())
    lines = [f"### `{verb}`", "", help_text[0].upper() + help_text[1:] + ".", "",
             "```", usage, "```", ""]
    rows = [action for action in parser._actions
            if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS]
    if rows:
        lines += ["| argument | default | what it does |", "|---|---|---|"]
        for action in rows:
            text = (action.help or "") % {**vars(action), "prog": parser.prog}
            lines.append(f"| {_cell(_names(action))} | {_cell(_default(action))} | "
                         f"{_cell(text)} |")
        lines.append("")
    return "\n".join(lines)


def reference() -> str:
    from orchestrator.cli import COMMANDS

    head = [f"Generated from the CLI's own parser by `{COMMAND}`; do not edit by hand.", ""]
    return "\n".join(head) + "\n" + "\n".join(section(verb, help_text)
                                            for verb, (_, help_text) in COMMANDS.items())


def render(text: str) -> str:
    if not MARKERS.search(text):
        raise SystemExit(f"command_docs: no <!-- commands begin/end --> markers in {DOC}")
    return MARKERS.sub(lambda m: f"{m.group(1)}{reference()}{m.group(3)}", text)


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    new = render(text)
    if argv == ["--check"]:
        if new != text:
            print(f"{DOC.relative_to(ROOT)}: the command reference differs from the parser; "
                  f"run: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    if new != text:
        DOC.write_text(new)
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
