"""Whose word a checked out cluster's head address is taken on. The state is data anyone who can
write its bucket or folder can change: an address it alone names never receives the cluster's
token, a job or a secret. The head is reached only at an address that

- the repository's file names (on-prem: `provider.head_ip`; `checkout` takes it from there);
- this machine pinned a host key for (it reached that head before, and ssh refuses any other
  key there): the state's address is taken as it is;
- the cloud says is the head: the running instance with Ray's tags for the cluster, in the
  location the repository's file names, asked with this machine's own credentials (Ray's
  `get_head_node_ip`). When the cloud names another address than the state's, the cloud's is
  the head (the state is out of date, or was written by someone else).

    head_of(name, provider, state_head, recorded, wanted, machine, where) -> Vouched

A KubeRay cluster is reached through the Kubernetes API (this machine's kubeconfig) in the
namespace its config names: the state's namespace is taken only when it is the file's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..state import State


@dataclass(frozen=True)
class Vouched:
    address: str | None            # the head to reach; None: none that anything vouches for
    by: str = ""                   # "pin", "cloud", "kubernetes" (what vouched), "" (nothing)
    refused: str | None = None     # why the state's address is not reached, and what to do
    note: str | None = None        # the state said another address than the one taken
    def head(self, state_head: str | None) -> str | None:
        """The head address a checked out record holds, the state's being `state_head`: a head
        Kubernetes vouched for is found through its API, never dialed, so the record keeps the
        state's address as the state said it."""
        return state_head if self.by == "kubernetes" else self.address


def pins(machine: State, name: str) -> Path | None:
    """The host keys this machine pinned for the cluster (None: it never reached it; nothing
    is made on this machine for a cluster it does not record)."""
    from ..launch.ray_up.known_hosts import FILE

    if machine.store.read_cluster(name) is None:
        return None
    file = machine.store.workspace(name) / FILE
    return file if file.is_file() else None


def pinned(machine: State, name: str, host: str) -> bool:
    """Whether this machine pinned a host key for `host` as one of the cluster's hosts."""
    from ..util import ssh

    file = pins(machine, name)
    return file is not None and bool(ssh.known_keys(file, host))


def _through_api(name: str, recorded: dict[str, Any], wanted: dict[str, Any] | None,
                 where: str) -> Vouched:
    said = (recorded.get("provider") or {}).get("namespace")
    if wanted is None or (wanted.get("provider") or {}).get("namespace") == said:
        return Vouched(None, "kubernetes")
    mine = (wanted.get("provider") or {}).get("namespace")
    return Vouched(None, refused=f"{where} places cluster {name!r} in namespace {said!r}, its "
                                 f"file in {mine!r}: orchestrate reaches it only where its "
                                 f"file says")


def head_of(name: str, provider: str, recorded_head: str | None, recorded: dict[str, Any],
            wanted: dict[str, Any] | None, machine: State, where: str) -> Vouched:
    """The head address to reach for a cluster the state records (cloud and KubeRay ones; an
    on-prem one's comes from its file). `wanted`: the repository's file rendered (None: gone;
    then the cloud is asked where the state's config says, as `ray down` would act there)."""
    from .. import launch
    from ..launch.ray_up.cloud_head import CloudUnasked, running_head
    from ..launch.ray_up.cloud_head import where as location

    if launch.Feature.HEAD_THROUGH_API in launch.features(provider):
        return _through_api(name, recorded, wanted, where)
    if recorded_head is not None and pinned(machine, name, recorded_head):
        return Vouched(recorded_head, "pin")
    asked = wanted if wanted is not None else recorded
    cloud = location(asked)
    try:
        address = running_head(asked)
    except CloudUnasked as exc:
        said = f"the state says its head is {recorded_head}" if recorded_head else \
            "the state names no head"
        return Vouched(None, refused=(
            f"{said}, and nothing vouches for that address: this machine has not pinned a host "
            f"key for it, and {cloud} could not be asked which instance is the head "
            f"({exc.message}). Give this machine read access to {cloud} (what `ray "
            f"get-head-ip` needs: on AWS, ec2:DescribeInstances) so orchestrate can ask, or "
            f"run it where the cluster was reached before"))
    if address is None:
        return Vouched(None, refused=f"{cloud} has no running head for cluster {name!r} (an "
                                     f"instance with Ray's tags for it)")
    if recorded_head is not None and address != recorded_head:
        return Vouched(address, "cloud", note=f"the state says its head is {recorded_head}, "
                                              f"{cloud} says {address}: {address} is reached")
    return Vouched(address, "cloud")
