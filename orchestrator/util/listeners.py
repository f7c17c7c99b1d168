"""Whose is a loopback listener: nothing that carries a token goes to one that is not ours.

A port on 127.0.0.1 is a name anyone on the machine can take. orchestrate used to pick a free
port, close it and hand the number to `ray start` or `ssh -L`; the number is in /proc/*/cmdline,
and whoever bound it first was taken for the cluster and sent the token. The design now leaves
no such gap where it can, and proves ownership where a check remains:

- an SSH forward listens on a Unix socket in a 0700 folder of ours, and the TCP port our
  clients and the browser use is a relay this process binds and holds for the whole block
  (`relay.Relay`): there is no moment where the port is free;
- the embedded Ray binds every port itself (port 0) inside a 0700 folder, and we read back the
  dashboard's port from the dashboard process's own listening socket (`reach.embedded`);
- before any request that carries a token, `check(address)` proves, for a loopback address,
  that every socket that could accept the connection (127.0.0.1:PORT, 0.0.0.0:PORT, [::]:PORT)
  is in LISTEN, owned by this user (/proc/net/tcp, tcp6) and held open by this process or by a
  process of the group vouched for that address (`vouch`: the embedded Ray's process group),
  found by the socket's inode among /proc/<pid>/fd. Anything else raises `NotOurs`, and no byte
  is sent.

What remains: the check and the connection are two steps, so a listener that dies between them
(the embedded Ray's dashboard crashing at that instant) could be replaced; the relay has no such
window. Addresses that are not loopback are not checked here (a cluster's own address: its
transport is the cluster's business). Without /proc (not Linux) nothing can be proven and the
check passes, as the sign-in link's uid check does.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import threading
import urllib.parse

LISTEN = "0A"


class NotOurs(Exception):
    """The listener at a loopback address is not proven ours; nothing was sent to it."""


_vouched: dict[int, int] = {}   # port -> process group whose members may hold it
_lock = threading.Lock()


def vouch(address: str, group: int) -> None:
    """From now on, a listener at `address` held by a process of group `group` is ours."""
    port = _port(address)
    if port is not None:
        with _lock:
            _vouched[port] = group


def _split(address: str) -> tuple[str, int | None]:
    parts = urllib.parse.urlsplit(address if "//" in address else f"//{address}")
    try:
        return parts.hostname or "", parts.port
    except ValueError:
        return parts.hostname or "", None


def _port(address: str) -> int | None:
    return _split(address)[1]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_host(host: str) -> bool:
    """Whether `host` (a name or an address, brackets allowed) is this machine's loopback."""
    return _loopback(host.strip("[]"))


def _v4(host: str) -> str:
    return socket.inet_aton(host)[::-1].hex().upper()


def _v6(host: str) -> str:
    packed = socket.inet_pton(socket.AF_INET6, host)
    return "".join(packed[i:i + 4][::-1].hex().upper() for i in range(0, 16, 4))


def _candidates(host: str) -> dict[str, set[str]]:
    """The local addresses (hex, as /proc/net/tcp{,6} writes them) of every listening socket
    that could take a connection to `host`."""
    v4 = {_v4("0.0.0.0")}
    v6 = {_v6("::")}
    if host in ("localhost", "::1"):
        v6.add(_v6("::1"))
    if host != "::1":
        ipv4 = "127.0.0.1" if host == "localhost" else host
        v4.add(_v4(ipv4))
        v6.add(_v6(f"::ffff:{ipv4}"))
    return {"/proc/net/tcp": v4, "/proc/net/tcp6": v6}


def listeners(address: str) -> list[tuple[int, int]]:
    """(uid, inode) of every socket in LISTEN that could take a connection to `address`."""
    host, port = _split(address)
    found = []
    for table, addresses in _candidates(host).items():
        try:
            with open(table) as lines:
                rows = lines.readlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            local, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and local in addresses:
                found.append((int(fields[7]), int(fields[9])))
    return found


def _sockets_of(pid: int | str) -> set[int]:
    inodes: set[int] = set()
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(f"{folder}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def members(group: int) -> list[int]:
    """The processes of this user in process group `group`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            if int(fields[2]) == group and os.stat(f"/proc/{name}").st_uid == os.getuid():
                found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _ours_listening(address: str) -> tuple[str, int | None, set[int]] | None:
    """(host, port, inodes) of the listeners that could take a connection to `address`, all
    of them this user's; None when nothing is to be checked (not loopback, no /proc);
    NotOurs when nothing listens there or another user does."""
    host, port = _split(address)
    if not _loopback(host) or not os.path.exists("/proc/net/tcp"):
        return None
    if port is None:
        raise NotOurs(f"{address} names no port")
    found = listeners(address)
    if not found:
        raise NotOurs(f"nothing listens at {host}:{port}")
    strangers = [uid for uid, _ in found if uid != os.getuid()]
    if strangers:
        raise NotOurs(f"{host}:{port} is held by another user (uid {strangers[0]})")
    return host, port, {inode for _, inode in found}


def check(address: str) -> None:
    """NotOurs unless every listener that could take a connection to `address` (a loopback
    address) is this user's and held by this process or by the group vouched for it."""
    known = _ours_listening(address)
    if known is None:
        return
    host, port, wanted = known
    held = _sockets_of("self")
    with _lock:
        group = _vouched.get(port) if port is not None else None
    if group is not None and not wanted <= held:
        for pid in members(group):
            held |= _sockets_of(pid)
    if not wanted <= held:
        expected = f"process group {group}" if group is not None else "this process"
        raise NotOurs(f"{host}:{port} is held by a process outside {expected}")


def _parent(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[1]
    except (OSError, IndexError):
        return None


def descends_from(pid: str, root: int) -> bool:
    """Whether process `pid` is `root` or one of its descendants (parents read from /proc)."""
    seen: set[str] = set()
    current: str | None = pid
    while current and current not in seen and current not in ("0", "1"):
        if current == str(root):
            return True
        seen.add(current)
        current = _parent(current)
    return False


def check_descendant(address: str, root: int) -> None:
    """NotOurs unless every listener that could take a connection to `address` (loopback) is
    this user's and held by process `root` or a descendant of it (the embedded Ray's `ray
    start`: Ray's workers, the Serve proxy among them, are its raylet's children, in process
    groups of their own and with process titles of their own)."""
    known = _ours_listening(address)
    if known is None:
        return
    host, port, wanted = known
    held: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != os.getuid():
                continue
        except OSError:
            continue
        if descends_from(name, root):
            held |= _sockets_of(name)
            if wanted <= held:
                return
    raise NotOurs(f"{host}:{port} is held by a process that is not process {root}'s")


def ours(address: str) -> bool:
    try:
        check(address)
    except NotOurs:
        return False
    return True


def held_by(pids: list[int], address: str) -> bool:
    """Whether one of `pids` holds a listener that could take a connection to `address`, and
    nobody else does."""
    found = {inode for uid, inode in listeners(address) if uid == os.getuid()}
    if not found or len(found) != len(listeners(address)):
        return False
    held: set[int] = set()
    for pid in pids:
        held |= _sockets_of(pid)
    return found <= held


def listening_ports(pid: int, host: str = "127.0.0.1") -> list[int]:
    """The ports process `pid` listens on at `host` exactly (IPv4)."""
    held = _sockets_of(pid)
    wanted = _v4(host)
    ports: list[int] = []
    try:
        with open("/proc/net/tcp") as lines:
            rows = lines.readlines()[1:]
    except OSError:
        return ports
    for row in rows:
        fields = row.split()
        if len(fields) >= 10 and fields[3] == LISTEN and int(fields[9]) in held:
            local, _, hex_port = fields[1].partition(":")
            if local == wanted:
                ports.append(int(hex_port, 16))
    return sorted(ports)


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client end of a loopback TCP connection (IPv4) to `server`, read from
    /proc/net/tcp (Linux); None where that cannot be told."""
    wanted = (f"{_v4(client[0])}:{client[1]:04X}", f"{_v4(server[0])}:{server[1]:04X}")
    try:
        with open("/proc/net/tcp") as table:
            for line in table.readlines()[1:]:
                fields = line.split()
                if (fields[1], fields[2]) == wanted:
                    return int(fields[7])
    except (OSError, IndexError, ValueError):
        return None
    return None
