"""One module per verb: `HELP`, `add_arguments(parser)`, `run(args) -> int`."""
