"""The API server inside a further real node's network namespace, at the address it has on the host.

The local API server listens on the host's loopback only. A node in its own network namespace has a loopback of its
own, so this relay listens there, on the same port, and connects each client to the host's: the node's kubelet, and
pods in the host network that reach the API server by its host address, see the API server where they would on the
host (its certificate names that address). TLS passes through untouched.

`python -m dra_conformance.backends.local.api_relay <netns handle> <port>`: the listening socket is made in the
node's namespace, every outgoing one in the host's (a socket keeps the namespace it was made in).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import sys

from dra_conformance.backends.local.network import LOOPBACK

CLONE_NEWNET = 0x40000000
# Bytes moved per read; the API server's watch events are small, lists larger.
CHUNK = 1 << 16


def listen_in(netns: str, port: int) -> socket.socket:
    """A listening TCP socket on LOOPBACK:`port` in the network namespace at handle `netns`; back in ours after."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((LOOPBACK, port))
            listener.listen(128)
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the host's network namespace")
    finally:
        os.close(own)
        os.close(target)
    return listener


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError):
        writer.close()


async def relay(listener: socket.socket, port: int) -> None:
    """Serve `listener` forever, each connection joined to LOOPBACK:`port` here."""

    async def join(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(LOOPBACK, port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))

    server = await asyncio.start_server(join, sock=listener)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    """Relay LOOPBACK:<port> of the namespace at <netns handle> to LOOPBACK:<port> here."""
    if len(argv) != 3 or not argv[2].isdigit():
        print("usage: python -m dra_conformance.backends.local.api_relay <netns handle> <port>", file=sys.stderr)
        return 2
    port = int(argv[2])
    try:
        listener = listen_in(argv[1], port)
    except OSError as error:
        print(f"api relay: listen on {LOOPBACK}:{port} in {argv[1]}: {error}", file=sys.stderr)
        return 1
    asyncio.run(relay(listener, port))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
