"""What Ray 2.60's own launcher accepts: `ray up`'s steps up to and including validation
(ray/autoscaler/_private/commands.py, `_bootstrap_config`), run on a config dict:

1. `prepare_config` (defaults.yaml laid under the file, legacy keys, on-prem node types, docker);
2. the provider's `fillout_available_node_types_resources`, whose failures `ray up` only warns
   about. AWS fills a node type's missing `resources` from EC2's `describe_instance_types`:
   that call goes to moto's server on loopback (`ec2_catalogue()`), at the wire, through Ray's own
   `list_ec2_instances` and boto3; its answer is kept per region, since a few hundred generated
   files would otherwise ask for the same 1,400 instance types each time. GCP's and Azure's
   classes are not imported (their SDKs are not installed here, and `ray up` would stop there):
   GCP's fill-in only adds TPU labels to `resources` already written and Azure has none, so
   neither changes what is accepted;
3. `validate_config` (Ray's JSON schema and its node-type checks).

`ray_verdict(config)` is None when Ray accepts, else why not (Ray's own exception, one line).
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
from collections.abc import Iterator
from typing import Any


class CatalogueChanged(BaseException):
    """Not an Exception: `_fill_resources` and `ray_verdict` take any Exception for Ray's verdict,
    and this is the test's own failure."""


@contextlib.contextmanager
def ec2_catalogue() -> Iterator[None]:
    """moto's EC2 on loopback for Ray's resource fill-in, each region's answer kept."""
    from moto.server import ThreadedMotoServer
    from ray.autoscaler._private.aws import node_provider

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}
    saved = {key: os.environ.get(key) for key in env}
    original = node_provider.list_ec2_instances
    answers: dict[str, list[dict[str, Any]]] = {}
    pristine: dict[str, list[dict[str, Any]]] = {}   # a copy of each, to tell a change

    def listed(region: str, aws_credentials: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        # Ray only reads the list; a deep copy per call took 0.3 s (1,400 instance types), a
        # comparison with a copy kept takes 10 ms and still fails on a change by the caller before
        if region not in answers:
            answers[region] = original(region, aws_credentials)
            pristine[region] = copy.deepcopy(answers[region])
        if answers[region] != pristine[region]:
            raise CatalogueChanged(f"Ray's fill-in changed the {region} instance types kept")
        return list(answers[region])

    from ray.autoscaler._private.aws import utils

    os.environ.update(env)
    node_provider.list_ec2_instances = listed
    utils.client_cache.cache_clear()  # Ray keeps its boto3 clients: none may point at a gone server
    try:
        yield
    finally:
        node_provider.list_ec2_instances = original
        utils.client_cache.cache_clear()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def _quiet() -> None:
    for name in ("ray", "ray.autoscaler", "botocore", "boto3", "werkzeug"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _fill_resources(config: dict[str, Any]) -> dict[str, Any]:
    """Step 2: as `ray up` does it, a failure only leaves the config as it was."""
    kind = (config.get("provider") or {}).get("type")
    if kind != "aws":  # see the module docstring for gcp and azure; local fills in nothing
        return config
    from ray.autoscaler._private.aws.node_provider import AWSNodeProvider

    try:
        filled: dict[str, Any] = AWSNodeProvider.fillout_available_node_types_resources(config)
    except Exception:  # noqa: BLE001 - ray up: "Failed to autodetect node resources", a warning
        return config
    return filled


def ray_verdict(config: Any) -> str | None:
    """None if Ray's launcher accepts `config` (a parsed cluster file), else the reason."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    _quiet()
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            prepared = prepare_config(copy.deepcopy(config))
            validate_config(_fill_resources(prepared))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any refusal, crash or abort is a "no"
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
    return None
