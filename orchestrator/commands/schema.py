"""orchestrate schema KIND: the JSON schema of a file kind, as shipped inside the package, for
editors (a YAML language server's completion, hover and inline errors) and for CI.

    orchestrate schema cluster                 print one schema
    orchestrate schema --write .schemas        write them all; print the editor settings that
                                               map the usual file names to them

The schemas are the ones `validate` checks against, so an editor and orchestrate agree.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# What each schema describes; `plan` is an output (`plan --format json`), not a file people write.
KINDS = {
    "cluster": "a cluster file (Ray's cluster-launcher YAML, or orchestrate's head/workers shorthand)",
    "experiment": "an experiment file",
    "service": "a service file (`orchestrate serve`)",
    "project": "a project file, orchestrate.yaml (`plan`, `apply`)",
    "plan": "the JSON of `plan --format json` and of a saved plan",
}
# The file names the docs use for each kind: the globs of the editor settings `--write` prints.
GLOBS = {
    "cluster": ["**/cluster_configs/*.yaml", "**/clusters/*.yaml"],
    "experiment": ["**/experiments/*.yaml"],
    "service": ["**/services/*.yaml"],
    "project": ["**/orchestrate.yaml"],
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", nargs="?", choices=tuple(KINDS), metavar="KIND",
                        help="cluster, experiment, service, project or plan")
    parser.add_argument("--write", metavar="DIR", type=Path,
                        help="write every schema into DIR (made if missing; files replaced) and "
                             "print the editor settings that use them")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="with --write: the settings as text for people, or json")


def text_of(kind: str) -> str:
    """The packaged schema of `kind`, as its file holds it."""
    from ..language.schema import schema_dir

    return (schema_dir() / f"{kind}.schema.json").read_text(encoding="utf-8")


def settings(folder: Path) -> dict[str, list[str]]:
    """VS Code's `yaml.schemas` (the YAML extension's setting): schema path -> file globs."""
    return {str(folder / f"{kind}.schema.json"): globs for kind, globs in GLOBS.items()}


def write(folder: Path) -> list[Path]:
    from ..errors import OrchestrateError
    from ..util.files import atomic_write

    if folder.exists() and not folder.is_dir():
        raise OrchestrateError(f"{folder} is not a folder; give --write a folder for the schemas")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for kind in KINDS:
            path = folder / f"{kind}.schema.json"
            atomic_write(path, text_of(kind), mode=0o644)   # public documents, not secrets
            written.append(path)
    except OSError as exc:
        raise OrchestrateError(f"cannot write the schemas into {folder}: "
                               f"{exc.strerror or exc}") from None
    return written


def run(args: argparse.Namespace) -> int:
    from ..errors import OrchestrateError

    if (args.kind is None) == (args.write is None):
        raise OrchestrateError("give a KIND to print (cluster, experiment, service, project, "
                               "plan) or --write DIR to write them all",
                               hint="orchestrate schema cluster > cluster.schema.json")
    if args.kind:
        if args.format == "json":
            raise OrchestrateError("--format applies to --write; a schema is JSON already")
        sys.stdout.write(text_of(args.kind))
        return 0
    written = write(args.write)
    mapping = settings(args.write)
    if args.format == "json":
        json.dump({"schemas": [str(p) for p in written], "yaml.schemas": mapping},
                  sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    print(f"wrote {len(written)} schemas into {args.write}")
    print("VS Code (the YAML extension, redhat.vscode-yaml), in .vscode/settings.json (paths "
          "from the workspace's root):")
    print(json.dumps({"yaml.schemas": mapping}, indent=2))
    print("or name a file's schema on its first line (a path relative to the YAML file, or "
          "absolute, as here): "
          f"# yaml-language-server: $schema={args.write.resolve() / 'experiment.schema.json'}")
    return 0
