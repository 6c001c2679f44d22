"""A real local HTTP server that receives webhooks: what it was sent, and answers
scripted per request (a status code, or a delay longer than the sender waits)."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    url: str
    received: list[Received] = field(default_factory=list)
    answers: deque = field(default_factory=deque)  # (status, delay_s) per request; then 200

    def answer(self, *statuses: int, delay: float = 0.0) -> None:
        self.answers.extend((status, delay) for status in statuses)


class _Handler(BaseHTTPRequestHandler):
    receiver: Receiver

    def do_POST(self):  # noqa: N802 — the name http.server calls
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        self.receiver.received.append(Received(self.path, dict(self.headers.items()), body))
        status, delay = self.receiver.answers.popleft() if self.receiver.answers else (200, 0.0)
        time.sleep(delay)
        payload = b"ok" if status < 300 else b"receiver says no"
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the sender gave up waiting

    def log_message(self, *args):
        pass


def start_receiver():
    """Start a receiver on 127.0.0.1; return (receiver, stop)."""
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    receiver = Receiver(url=f"http://127.0.0.1:{server.server_port}/hooks/berth")
    handler.receiver = receiver
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        server.server_close()

    return receiver, stop


def start_tls_receiver(tmp_path, name: str):
    """A receiver over https with a self-signed certificate for `name`; return
    (receiver, stop, the certificate's path, which a client trusts as its CA)."""
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    handler = type("Handler", (_Handler,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    receiver = Receiver(url=f"https://{name}:{server.server_port}/hooks/berth")
    handler.receiver = receiver
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop():
        server.shutdown()
        server.server_close()

    return receiver, stop, cert_path
