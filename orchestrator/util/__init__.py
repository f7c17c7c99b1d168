"""Small helpers with no knowledge of clusters or experiments, each written once.

    files      atomic writes, private folders, JSON state files that may be damaged
    locks      an exclusive lock on a file that names its holder (filelock)
    waiting    poll until something is true or a deadline passes
    processes  stop a process group, find what is left of it (psutil)
    ports      free TCP ports on loopback
    http       the dashboard's HTTP API with a bearer token; "does it answer"
    ssh        the `ssh` command lines we run ourselves, with Ray's options
    text       did-you-mean suggestions
    uris       "is this a URI"

Nothing here imports from the rest of orchestrator except `errors`. `filelock` and `psutil` come
with the `ray` extra (every command that locks or stops processes needs Ray anyway); without
them those helpers raise MissingDependency with the `pip install` to run.
"""
