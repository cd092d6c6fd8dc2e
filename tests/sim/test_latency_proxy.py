"""The benchmark's latency proxy passes every byte both ways, in order, and closes cleanly."""

import socket
import threading

from sim.latency_proxy import LatencyProxy


def echo_server():
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_bytes_pass_both_ways_in_order_and_eof_travels():
    server = echo_server()
    payload = bytes(range(256)) * 1000  # many chunks
    with server, LatencyProxy(server.getsockname()[:2], delay_s=0.001) as proxy:
        with socket.create_connection((proxy.host, proxy.port)) as client:
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)
            got = b""
            while data := client.recv(65536):
                got += data
        assert got == payload
        assert proxy.connections == 1
