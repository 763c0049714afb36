"""A TCP proxy on 127.0.0.1 in front of a real server, which a fault test can cut and restore:
cut, it resets every open connection and refuses new ones, as a store that went away does to
its clients, while the server behind it keeps its data (an in-memory emulator restarted would
lose every object, and with them what the test checks afterwards)."""

from __future__ import annotations

import socket
import threading


class CutProxy:
    """Forwards 127.0.0.1:`port` to `target_port` until `cut()`; `restore()` forwards again."""

    def __init__(self, target_port: int):
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        """The URL clients use instead of the server's."""
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Resets every connection through the proxy and refuses the next ones."""
        with self._lock:
            self._cut = True
            for connection in self._open:
                _reset(connection)
            self._open.clear()

    def restore(self) -> None:
        """Forwards new connections again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Stops listening and drops every connection."""
        self._closed = True
        self.cut()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    _reset(client)
                    continue
                try:
                    upstream = socket.create_connection(self._target, timeout=10)
                except OSError:
                    _reset(client)
                    continue
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for each in (source, sink):
                with self._lock:
                    self._open.discard(each)
                try:
                    each.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _reset(connection: socket.socket) -> None:
    """Closes with a reset (RST), as a peer that died does, not an orderly end of stream."""
    try:
        connection.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        connection.close()
    except OSError:
        pass
