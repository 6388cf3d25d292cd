"""A Redis Cluster (or Valkey cluster) of a test module's own: N masters, optionally a replica each, on free loopback
ports, created with the engine's cli (`--cluster create ... --cluster-yes`) and stopped by the test.

Started and stopped blocking (no event loop), so one cluster serves a whole module through a module-scoped fixture
while each test runs in its own loop."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis

from tests.ports import cluster_port
from tests.redis_server import ANY_ENGINE, Engine, binaries
from tests.support import eventually_blocking

NODE_TIMEOUT_MS = 1_000  # how long a master may be silent before its replica is promoted: short, so tests are too


class Node:
    """One server process of the cluster."""

    def __init__(self, directory: Path, executable: str) -> None:
        directory.mkdir(parents=True)
        self.directory, self.executable, self.port = directory, executable, cluster_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [self.executable, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        argv += ["--save", "", "--appendonly", "no", "--logfile", str(self.directory / "server.log")]
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        argv += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"a cluster node exited: {self.log()[-1000:]}")
        return "Ready to accept connections" in self.log()

    def log(self) -> str:
        path = self.directory / "server.log"
        return path.read_text() if path.exists() else ""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.running:
            assert self.process is not None
            self.process.kill()
            self.process.wait(20)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)


class ClusterServers:
    """`masters` masters and `replicas` replicas of each, one server process per node."""

    def __init__(self, directory: Path, masters: int = 3, replicas: int = 0, engine: Engine = ANY_ENGINE) -> None:
        self.engine = engine
        tools = binaries(engine)
        self.cli = tools.cli
        self.nodes = [Node(directory / f"node{i}", tools.server) for i in range(masters * (1 + replicas))]
        self.replicas = replicas

    @property
    def url(self) -> str:
        """The data plane's setting: every node, so a client finds the cluster whichever is down."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        eventually_blocking(lambda: all(node.ready() for node in self.nodes), what="the cluster's nodes", timeout=30)
        argv = [self.cli, "--cluster", "create", *(f"127.0.0.1:{node.port}" for node in self.nodes)]
        argv += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        created = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=False)
        if created.returncode != 0:
            raise RuntimeError("cluster create failed:\n" + created.stdout.decode(errors="replace")[-2000:])
        self.until_ok()
        if self.replicas:
            self.until_replicated()

    def until_replicated(self, timeout: float = 30) -> None:
        """Until every master streams to its replicas: a replica not yet synced cannot be promoted (its data is too
        old for the cluster), and a master without one has nothing for WAIT to count."""

        def synced() -> bool:
            for node in self.live():
                with node.client() as client:
                    info = client.info("replication")
                if info["role"] == "master" and int(info.get("connected_slaves", 0)) < self.replicas:
                    return False
                if info["role"] != "master" and (
                    info.get("master_link_status") != "up" or int(info.get("master_sync_in_progress", 0))
                ):
                    return False
            return True

        eventually_blocking(synced, what="every replica synced with its master", timeout=timeout)

    def until_ok(self, timeout: float = 30) -> None:
        """Until every live node says the cluster is ok: every slot served by a live master."""

        def ok() -> bool:
            for node in self.live():
                with node.client() as client:
                    if client.cluster("info").get("cluster_state") != "ok":
                        return False
            return True

        eventually_blocking(ok, what="the cluster's state ok", timeout=timeout)

    def live(self) -> list[Node]:
        return [node for node in self.nodes if node.running]

    def masters(self) -> list[Node]:
        """The live masters, by their own word."""
        found = []
        for node in self.live():
            with node.client() as client:
                if client.info("replication")["role"] == "master":
                    found.append(node)
        return found

    def master_of(self, key: str) -> Node:
        """The node that serves `key`'s slot now."""
        with self.live()[0].client() as client:
            slot = int(client.cluster("keyslot", key))
            for low, high, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(low) <= slot <= int(high):
                    return next(node for node in self.nodes if node.port == int(master[1]))
        raise LookupError(key)

    def flush(self) -> None:
        for node in self.masters():
            with node.client() as client:
                client.flushall()

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
