"""Real network partitions for the drills: network namespaces joined by veth pairs (issue 25).

``NetLab`` builds a private network for one drill environment and takes it down again:

- a bridge in the current (root) namespace whose address is where the test's clients come from
  (``client_host``, ``.1`` of a /24 picked at random among 10.200-249.x.0 that no route here uses);
- one namespace for etcd (``etcd_host``, ``.2``) and one per march node (``node_host(i)``, ``.11``,
  ``.12`` ...), each joined to the bridge by a veth pair. Processes are started in their namespace
  by ``wrapper(name)`` (``ip netns exec <ns>``, which executes the command: same pid).

**A cut drops packets silently, both ways**, as a pulled cable does: nothing is refused, a
connection attempt hangs, bytes already sent are retransmitted by TCP and arrive late if the cut
heals in time. It is made of ``ip rule ... blackhole`` rules on the receiving side, in the private
namespaces only: a packet from a cut-off address is dropped by the namespace that receives it
(in each private namespace the ``local`` lookup is moved behind these rules, else it would deliver
first). ``cut(node, "etcd")`` separates a node from etcd; ``cut(node, "all")`` from etcd, the other
nodes and the clients (the clients' packets are dropped in the node's namespace; the root
namespace gets no rule at all). ``heal(node)`` removes that node's rules everywhere.

**Names are unique and cleaned up.** Every object carries a random tag (links ``mq<tag>...``, at
most 15 characters; namespaces ``march-<pid>-<tag>-<name>``), so parallel runs never collide;
``close()`` deletes every namespace and link it made and is safe to call twice (DrillEnv calls it
in a ``finally``). ``sweep()`` removes what a run that died without its ``finally`` left behind
(namespaces whose pid is gone, with their links).

``unavailable()`` says why this machine cannot do it (not root, no ``ip``, namespaces not
permitted), for tests to skip with that reason.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator

IP = "ip"
PREFIX = "march"  # namespaces: march-<pid>-<tag>-<name>
LINK = "mq"  # links: mq<tag>b (bridge), mq<tag>e / mq<tag><i> (host ends of the veth pairs)
FIRST_NODE = 11  # node i (1-based) gets .10+i
_NS_RE = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]{{6}})-\S+")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([IP, *args], capture_output=True, text=True, timeout=10, check=False)
    if check and done.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


@functools.cache
def unavailable() -> str | None:
    """Why real partitions cannot be made here (None: they can). Checked once per process."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns)"
    if shutil.which(IP) is None:
        return "no `ip` command (iproute2)"
    probe = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-probe"
    try:
        _ip("netns", "add", probe)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`ip netns add` is not permitted here: {e}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def _live_namespaces() -> list[str]:
    done = _ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> list[str]:
    """Remove the namespaces (and their links) of runs whose process is gone; what was removed."""
    removed: list[str] = []
    for ns in _live_namespaces():
        m = _NS_RE.match(ns)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        tag = m.group(2)
        _ip("netns", "del", ns, check=False)
        removed.append(ns)
        for link in _links(tag):
            _ip("link", "del", link, check=False)
            removed.append(link)
    return removed


def _links(tag: str) -> list[str]:
    done = _ip("-o", "link", "show", check=False)
    names = [line.split(":")[1].strip().split("@")[0] for line in done.stdout.splitlines() if ":" in line]
    return [n for n in names if n.startswith(LINK + tag)]


def _free_subnet() -> str:
    """A 10.x.y.0/24 (first three octets) that no address or route here uses."""
    used = _ip("-o", "addr", check=False).stdout + _ip("route", check=False).stdout
    rng = random.Random(secrets.randbits(32))
    for _ in range(200):
        net = f"10.{rng.randrange(200, 250)}.{rng.randrange(0, 256)}"
        if f" {net}." not in used and f"{net}.0/" not in used:
            return net
    raise OSError("no free 10.x.y.0/24 for the drill's network")


class NetLab:
    """The network of one drill environment (module docstring): ``names`` are the namespaces to
    make besides etcd's (``n1``, ``n2`` ...)."""

    def __init__(self, names: list[str]) -> None:
        self.tag = secrets.token_hex(3)
        self.names = list(names)
        self.net = ""
        self.bridge = f"{LINK}{self.tag}b"
        self.namespaces: dict[str, str] = {}  # name -> namespace
        self.hosts: dict[str, str] = {}  # name -> its address
        self._rules: dict[str, list[tuple[str, int]]] = {}  # cut node -> (namespace, pref) of its rules
        self._links: list[str] = []
        self._pref = 100  # rule priorities handed out (each rule its own, to delete exactly it)

    # -- addresses ----------------------------------------------------------------------------
    @property
    def client_host(self) -> str:
        return f"{self.net}.1"

    @property
    def etcd_host(self) -> str:
        return self.hosts["etcd"]

    def node_host(self, name: str) -> str:
        return self.hosts[name]

    def wrapper(self, name: str) -> list[str]:
        """The command prefix that runs a process in ``name``'s namespace (same pid: ip executes it)."""
        return [IP, "netns", "exec", self.namespaces[name]]

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Make the bridge, the namespaces and the veth pairs; on any failure take down what was made."""
        try:
            self.net = _free_subnet()
            _ip("link", "add", self.bridge, "type", "bridge")
            self._links.append(self.bridge)
            _ip("addr", "add", f"{self.client_host}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for index, name in enumerate(["etcd", *self.names]):
                self._add(name, 2 if index == 0 else FIRST_NODE + index - 1)
        except BaseException:
            self.close()
            raise

    def _add(self, name: str, last: int) -> None:
        ns = f"{PREFIX}-{os.getpid()}-{self.tag}-{name}"
        _ip("netns", "add", ns)
        self.namespaces[name] = ns
        host_end = f"{LINK}{self.tag}{'e' if name == 'etcd' else name.lstrip('n')}"
        peer = f"{host_end}p"
        _ip("link", "add", host_end, "type", "veth", "peer", "name", peer)
        self._links.append(host_end)
        _ip("link", "set", peer, "netns", ns)
        _ip("link", "set", host_end, "master", self.bridge)
        _ip("link", "set", host_end, "up")
        address = f"{self.net}.{last}"
        self.hosts[name] = address
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", peer)
        _ip("-n", ns, "link", "set", peer, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        # The cut rules must come before the local table, which would deliver a packet first.
        _ip("-n", ns, "rule", "add", "pref", "32000", "lookup", "local")
        _ip("-n", ns, "rule", "del", "pref", "0")

    def close(self) -> None:
        """Delete every namespace and link this lab made (idempotent; errors ignored, then checked)."""
        for ns in self.namespaces.values():
            _ip("netns", "del", ns, check=False)
        for link in [*self._links[1:], *self._links[:1]]:  # the veth pairs, then the bridge
            _ip("link", "del", link, check=False)
        left = [n for n in _live_namespaces() if f"-{self.tag}-" in n] + (_links(self.tag) if self.tag else [])
        self.namespaces.clear()
        self._links.clear()
        self._rules.clear()
        if left:
            raise OSError(f"the drill's network was not fully removed: {left}")

    def __enter__(self) -> NetLab:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults -------------------------------------------------------------------------------
    def _drop(self, ns_of: str, source: str) -> tuple[str, int]:
        """Drop every packet from ``source`` arriving in ``ns_of``'s namespace."""
        self._pref += 1
        ns = self.namespaces[ns_of]
        _ip("-n", ns, "rule", "add", "pref", str(self._pref), "from", source, "blackhole")
        return ns, self._pref

    def cut(self, name: str, scope: str = "etcd") -> None:
        """Cut node ``name`` off: from etcd (``"etcd"``) or from everything (``"all"``: etcd, the
        other nodes, the clients). Both ways, silently. Cutting a node already cut adds to it."""
        rules = self._rules.setdefault(name, [])
        me = self.hosts[name]
        if scope == "etcd":
            rules += [self._drop(name, self.etcd_host), self._drop("etcd", me)]
        elif scope == "all":
            rules.append(self._drop(name, f"{self.net}.0/24"))
            rules += [self._drop(other, me) for other in self.hosts if other != name]
        else:
            raise ValueError(f"unknown cut scope {scope!r}")

    def heal(self, name: str | None = None) -> None:
        """Remove the rules of node ``name``'s cuts (every node's with None)."""
        for node in [name] if name is not None else list(self._rules):
            for ns, pref in self._rules.pop(node, []):
                _ip("-n", ns, "rule", "del", "pref", str(pref), check=False)

    def is_cut(self, name: str) -> bool:
        return bool(self._rules.get(name))

    @contextlib.contextmanager
    def cutting(self, name: str, scope: str = "etcd") -> Iterator[None]:
        """``cut`` for the block, healed whatever happens in it."""
        self.cut(name, scope)
        try:
            yield
        finally:
            self.heal(name)

    def describe(self) -> str:
        rules = {n: [f"{ns}:{p}" for ns, p in r] for n, r in self._rules.items() if r}
        return f"netlab {self.tag} {self.net}.0/24 hosts {self.hosts} cut {rules or 'none'}"
