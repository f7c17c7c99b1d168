"""Run in every worker process of the job (runtime_env `worker_process_setup_hook`) and at the
start of its driver: the experiment's secret variables into os.environ, the variables the trainers'
frameworks read at import (`JobTrainer.ENVIRONMENT`, a user's own value wins), then the
network."""
from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

from .. import contract
from ..util.text import hide

__all__ = ["forget_secrets", "framework_environment", "hide", "load_secrets", "setup"]

def load_secrets() -> dict[str, str]:
    """The values `run.secrets` shipped (contract.SECRETS_MODULE), copied into os.environ;
    RuntimeError when the job expects some (contract.SECRET_NAMES_ENV) and they did not come."""
    names = os.environ.get(contract.SECRET_NAMES_ENV)
    if not names:
        return {}
    try:
        module = importlib.import_module(contract.SECRETS_MODULE)
    except ImportError as exc:
        raise RuntimeError(f"the job's secret variables ({names}) did not reach this process: "
                           f"no module {contract.SECRETS_MODULE} in its py_modules") from exc
    values: dict[str, str] = dict(module.VALUES)
    os.environ.update(values)
    return values


def forget_secrets() -> None:
    """Remove this node's unpacked copy of the secrets' package (the driver, once the job is
    done; Ray would keep it in its cache folder)."""
    try:
        module = importlib.import_module(contract.SECRETS_MODULE)
    except ImportError:
        return
    if module.__file__:
        shutil.rmtree(Path(module.__file__).parent, ignore_errors=True)


def framework_environment() -> None:
    """Each trainer's `JobTrainer.ENVIRONMENT` into os.environ (a value already set wins), before
    anything imports the framework."""
    from . import trainers

    for trainer in trainers.JOB_TRAINERS.values():
        for name, value in trainer.ENVIRONMENT.items():
            os.environ.setdefault(name, value)


def setup() -> None:
    from . import network

    load_secrets()
    framework_environment()
    network.setup()
