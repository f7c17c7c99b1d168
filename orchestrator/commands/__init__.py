"""One module per verb: `add_arguments(parser)` and `run(args) -> int`; the verb and its
one-line help are listed in `orchestrator.cli.COMMANDS`."""
