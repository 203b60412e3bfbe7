"""Multi-node rendezvous of the stand-in: a real TCP connection between the simulated nodes of one server; and the
listener a single-node replica's process group keeps (``open_store``).

What torch.distributed's TCPStore does for ``--dist-init-addr HOST:PORT --nnodes N --node-rank R``: node rank 0
listens on PORT (on every address, as TCPStore does), every other node connects (retrying until the distributed-init
timeout) and says which node it is; when all N nodes are there the head answers GO. The connections stay open: when a
node dies its sockets close and the others notice (EOF), which is how a peer's death reaches them here (NCCL notices
it through its own sockets).

The launcher (engine.py) runs the rendezvous in a thread before it forks the scheduler processes; the ranks wait on
the shared state in ``init_torch_distributed`` and raise torch's own error text when it fails. The texts are torch's,
as printed in public reports (cited beside each).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import socket
import threading
import time

logger = logging.getLogger(__name__)

PENDING, JOINED, TIMEOUT, LOST = 0, 1, 2, 3
# torch's default distributed timeout for NCCL process groups (10 minutes) when --dist-timeout is not given: the
# public reports below print 600000ms / "after 601 seconds" with it.
DEFAULT_TIMEOUT = 600


def store_timeout_text(timeout: int, joined: int, world: int) -> str:
    """The head's TCPStore when ranks are missing. Real text: "torch.distributed.DistStoreError: Timed out after 901
    seconds waiting for clients. 1/3 clients joined." (https://github.com/Liuziyu77/Visual-RFT/issues/123; the same
    with "16/32 clients joined" from SGLang: https://github.com/Ascend/sglang/issues/708)."""
    return f"Timed out after {timeout + 1} seconds waiting for clients. {joined}/{world} clients joined."


def client_timeout_text(timeout: int, host: str, port: int) -> str:
    """A node that cannot reach the head. Real text from an SGLang scheduler: "[c10d] The client socket has timed out
    after 600000ms while trying to connect to (sws-8h100grid-05, 8000)." (https://github.com/sgl-project/sglang/issues/
    2561), raised as "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying
    to connect to (172.17.0.9, 46229)." (https://github.com/vllm-project/vllm/issues/19670)."""
    return f"The client socket has timed out after {timeout * 1000}ms while trying to connect to ({host}, {port})."


def remote_error_text(peer: str, port: int) -> str:
    """A peer that died after joining. Real text: "NCCL error: remote process exited or there was a network error,
    NCCL version 2.20.5 ncclRemoteError: A call failed possibly due to a network error or a remote process exiting
    prematurely. Last error: NET/IB : Got completion from peer ..." (https://github.com/deepseek-ai/DeepEP/issues/106);
    the socket transport's "Net : Connection closed by remote peer HOST<47861>"
    (https://github.com/NVIDIA/nccl/issues/795)."""
    return (
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there "
        "was a network error, NCCL version 2.27.5\n"
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
        "Last error:\n"
        f"Net : Connection closed by remote peer {peer}<{port}>"
    )


def hold(listener: socket.socket, keep: int = 64) -> None:
    """Accept connections and hold them open for the life of the process, as the store's server does (the stand-in
    speaks no store protocol: a connection made now gets no answer)."""
    held: list[socket.socket] = []
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        held.append(conn)
        if len(held) > keep:
            held.pop(0).close()


def open_store(port: int | None) -> socket.socket:
    """The TCPStore of a single-node replica's process group. SGLang 0.5.9 initialises it at
    ``tcp://127.0.0.1:{nccl_port}`` (``nccl_port`` = ``--nccl-port``, else ``get_free_port()``: a port the kernel
    picks from ``net.ipv4.ip_local_port_range``), and torch's store binds that port on every interface, dual-stack
    ``::`` where IPv6 exists, else ``0.0.0.0`` (docs/security.md cites both); it listens as long as the server runs."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port or 0))
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("0.0.0.0", port or 0))
    sock.listen(64)
    threading.Thread(target=hold, args=(sock,), name="sim-store", daemon=True).start()
    return sock


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class Rendezvous:
    """Shared (fork-inherited) state plus the thread that keeps the connections."""

    def __init__(self, server_args, *, skip_join: bool = False):
        self.nnodes = max(1, server_args.nnodes)
        self.node_rank = server_args.node_rank
        self.host, self.port = split_addr(server_args.dist_init_addr)
        self.timeout = int(server_args.dist_timeout or DEFAULT_TIMEOUT)
        self.skip_join = skip_join
        ctx = mp.get_context("fork")
        self.status = ctx.Value("i", PENDING)
        self.joined = ctx.Value("i", 1)
        self.peer = ctx.Array("c", 256)
        self.children: list[int] = []
        self.local_ranks = 1
        # collectives: each rank counts its arrivals at a barrier; the barrier is passed when every node's ranks
        # arrived (what an all-reduce across the nodes needs)
        self.arrived = ctx.Value("i", 0)
        self.passed = ctx.Value("i", 0)
        self._socks: list[socket.socket] = []
        self._reported: dict[int, set] = {}
        self._lock = threading.Lock()

    # ---- launcher side ------------------------------------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._run, name="sim-rendezvous", daemon=True).start()

    def _set(self, status: int, peer: str = "") -> None:
        with self.status.get_lock():
            if self.status.value in (PENDING, JOINED):
                self.peer.value = peer.encode()[:255]
                self.status.value = status

    def _run(self) -> None:
        try:
            if self.node_rank == 0:
                self._serve()
            else:
                self._join()
        except Exception as exc:  # the launcher must not die silently: the ranks see the failure instead
            logger.error(f"rendezvous failed: {exc!r}")
            self._set(LOST, f"{self.host}")

    def _serve(self) -> None:
        listener = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("", self.port))
        listener.listen(64)
        deadline = time.monotonic() + self.timeout
        peers: dict[int, tuple[socket.socket, str]] = {}
        while len(peers) < self.nnodes - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                listener.close()
                for s, _ in peers.values():
                    s.close()
                self.joined.value = 1 + len(peers)
                self._set(TIMEOUT)
                return
            listener.settimeout(min(left, 1.0))
            try:
                conn, addr = listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            try:
                hello = conn.recv(64).decode().split()
            except OSError:
                conn.close()
                continue
            if len(hello) == 2 and hello[0] == "JOIN" and hello[1].isdigit() and 0 < int(hello[1]) < self.nnodes:
                peers[int(hello[1])] = (conn, addr[0])
                self.joined.value = 1 + len(peers)
            else:
                conn.close()
        # torch's TCPStore serves for the life of the process group: the head keeps listening on every interface
        listener.settimeout(None)
        threading.Thread(target=hold, args=(listener,), name="sim-store", daemon=True).start()
        for s, _ in peers.values():
            s.settimeout(None)
            s.sendall(b"GO\n")
        self._socks = [s for s, _ in peers.values()]
        self._set(JOINED)
        for rank, (s, addr) in peers.items():
            threading.Thread(target=self._watch, args=(s, addr, rank), daemon=True).start()
        self._collect()

    def _join(self) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            if self.skip_join:  # the sim fault "nojoin": packets to the head are dropped (a firewall, a wrong route)
                time.sleep(max(0.0, deadline - time.monotonic()))
                self._set(TIMEOUT)
                return
            try:
                sock = socket.create_connection((self.host, self.port), timeout=2)
                sock.sendall(f"JOIN {self.node_rank}\n".encode())
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                answer = sock.recv(16)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    self._set(TIMEOUT)
                    return
                time.sleep(1.0)
        if not answer.startswith(b"GO"):
            sock.close()
            self._set(LOST, self.host)
            self._notify()
            return
        sock.settimeout(None)
        self._socks = [sock]
        self._set(JOINED)
        threading.Thread(target=self._watch, args=(sock, self.host, 0), daemon=True).start()
        self._collect()

    def _watch(self, sock: socket.socket, addr: str, peer_rank: int) -> None:
        buf = b""
        try:
            while True:
                data = sock.recv(256)
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._message(line.decode(errors="replace").split(), peer_rank)
        except OSError:
            pass
        self._set(LOST, addr)
        self._notify()

    def _message(self, words: list[str], peer_rank: int) -> None:
        if len(words) != 2 or not words[1].isdigit():
            return
        k = int(words[1])
        if words[0] == "B" and self.node_rank == 0:  # a node's ranks all arrived at barrier k
            with self._lock:
                self._reported.setdefault(k, set()).add(peer_rank)
        elif words[0] == "P" and self.node_rank != 0:  # the head says every node arrived
            self.passed.value = max(self.passed.value, k)

    def _collect(self) -> None:
        """The launcher side of the barriers: report this node's arrivals; on the head, release everyone."""
        sent = 0
        while self.status.value == JOINED:
            k = self.arrived.value // max(1, self.local_ranks)
            if k > sent:
                sent = k
                if self.node_rank != 0:
                    self._send(f"B {k}\n")
            if self.node_rank == 0 and self.passed.value < sent:
                with self._lock:
                    nodes = len(self._reported.get(sent, ()))
                if nodes >= self.nnodes - 1:
                    self._send(f"P {sent}\n")
                    self.passed.value = sent
            time.sleep(0.02)

    def _send(self, text: str) -> None:
        for sock in self._socks:
            try:
                sock.sendall(text.encode())
            except OSError:
                pass

    def _notify(self) -> None:
        """Tell this node's ranks that a peer is gone (they raise NCCL's remote error from where they are)."""
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    # ---- rank side ----------------------------------------------------------------------------------------------
    def wait(self) -> int:
        while self.status.value == PENDING:
            time.sleep(0.05)
        return self.status.value

    def barrier(self) -> None:
        """A collective across the nodes (torch's all-reduce): returns when every rank of every node arrived."""
        with self.arrived.get_lock():
            self.arrived.value += 1
            k = (self.arrived.value + self.local_ranks - 1) // self.local_ranks
        while self.passed.value < k:
            if self.status.value != JOINED:
                time.sleep(3600)  # a peer is gone: SIGUSR1 raises NCCL's remote error here
            time.sleep(0.02)

    def peer_name(self) -> str:
        return self.peer.value.decode() or self.host
