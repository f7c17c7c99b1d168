"""GitOps over a project: a repository of cluster and experiment files with one shared state.

    desired   the files, loaded, rendered and hashed independent of the machine
    store     the state document in its backend, its lock, the tokens' references
    checkout  checking a state entry out into this machine's workspace, and back in
    refresh   what is live (read-only, in a scratch folder)
    planner   the pure decision: ProjectPlan
    plan      the `plan` use case; apply: the `apply` use case; actions: one change each
    report    text, markdown, JSON and saved plan files
    sync      `up`/`down`/`run` of a file that belongs to a project keep its state true
"""
