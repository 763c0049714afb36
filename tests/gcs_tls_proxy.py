"""Google's storage hosts on 127.0.0.1, served by the GCS emulator: an HTTPS proxy that lets
TensorFlow's built-in gs:// filesystem, the one real GCS uses, reach `gcp-storage-emulator`.

TensorFlow's built-in gs:// has no endpoint setting: it always asks
https://www.googleapis.com/storage/v1/... (metadata, listing, copy, delete),
https://www.googleapis.com/upload/storage/v1/... (uploads) and
https://storage.googleapis.com/BUCKET/OBJECT (reads), through libcurl. libcurl honours
`https_proxy`, and TensorFlow's HTTP request honours `CURL_CA_BUNDLE` and its auth provider
`GOOGLE_AUTH_TOKEN_FOR_TESTING` (then nothing asks a metadata server or Google's OAuth). So
a process whose environment holds `environment()` sends its gs:// requests here: this proxy
accepts CONNECT to those two hosts only, terminates TLS with a certificate for them signed by a
CA it makes at start (the CA is in `ca_file`, trusted by nothing else), and forwards each plain
HTTP request to the emulator.

Where the emulator answers differently from Google, the proxy translates, so that TensorFlow
sees what Google would send:
- a resumable upload's session URI names the emulator (which builds it from `Host`); it is
  given back on the Google host the upload was started on, as Google's is. `Host` stays the
  emulator's own address, so the links the emulator stores in an object's resource
  (`mediaLink`, which google-cloud-storage downloads from) reach it directly;
- an empty media upload (`uploadType=media`, what `tf.io.gfile.makedirs` sends for each folder
  marker) fails in the emulator (it reads no body as None); it is sent as the XML API's
  `PUT /BUCKET/OBJECT`, which tests/gcs_emulator.py mends for empty bodies, after its
  `ifGenerationMatch` (0 from TensorFlow: "only if absent") is checked as GCS checks it (412
  otherwise), and answered with the object's resource, as Google answers a media upload.
"""

from __future__ import annotations

import datetime
import http.client
import http.server
import ipaddress
import json
import socketserver
import ssl
import threading
import urllib.parse
from pathlib import Path

GOOGLE_STORAGE_HOSTS = ("www.googleapis.com", "storage.googleapis.com")
# A fixed bearer token for TensorFlow's auth provider: the emulator checks none, and with it set
# TensorFlow never looks for credentials (no metadata server, no OAuth exchange).
TOKEN = "gcs-emulator"
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
    "content-length",
}


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA made now, and a certificate for Google's storage hosts signed by it; returns the
    paths of the CA's certificate, the host certificate and the host key (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid_from, valid_to = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Conveyor test GCS proxy CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    host_key = ec.generate_private_key(ec.SECP256R1())
    host = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, GOOGLE_STORAGE_HOSTS[0])]))
        .issuer_name(ca_name)
        .public_key(host_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from)
        .not_valid_after(valid_to)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name) for name in GOOGLE_STORAGE_HOSTS]
                + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    pem = serialization.Encoding.PEM
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "host.pem", folder / "host.key"
    ca_file.write_bytes(ca.public_bytes(pem))
    cert_file.write_bytes(host.public_bytes(pem))
    key_file.write_bytes(
        host_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_file, cert_file, key_file


class GcsTlsProxy:
    """The proxy on 127.0.0.1, forwarding to the emulator at `emulator_endpoint`
    (http://127.0.0.1:PORT); its CA and keys are written into `folder`."""

    def __init__(self, emulator_endpoint: str, folder: Path):
        parsed = urllib.parse.urlsplit(emulator_endpoint)
        emulator = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.ca_file, cert_file, key_file = _certificates(folder)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert_file, key_file)
        self.requests: list[str] = []  # "METHOD HOST PATH -> STATUS", for a failing test to show

        proxy = self

        class Tunnel(_TunnelHandler):
            tls_context = tls
            emulator_address = emulator
            log = proxy.requests

        self._server = _Server(("127.0.0.1", 0), Tunnel)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """What a process needs for TensorFlow's built-in gs:// to come here: the proxy for
        https (nothing else: local addresses stay direct), the CA, and the auth provider's
        fixed token."""
        return {
            "https_proxy": self.url,
            "HTTPS_PROXY": self.url,
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
            "CURL_CA_BUNDLE": str(self.ca_file),
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": TOKEN,
        }

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _TunnelHandler(http.server.BaseHTTPRequestHandler):
    """Answers CONNECT to Google's storage hosts, then serves the tunnel's requests over TLS."""

    tls_context: ssl.SSLContext
    emulator_address: tuple[str, int]
    log: list[str]

    def do_CONNECT(self) -> None:
        host, _, port = self.path.partition(":")
        if host not in GOOGLE_STORAGE_HOSTS or port not in ("", "443"):
            self.send_error(403, f"this proxy serves only {', '.join(GOOGLE_STORAGE_HOSTS)}")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        try:
            tunnel = self.tls_context.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):
            self.close_connection = True
            return
        handler = type(
            "Api",
            (_GoogleApiHandler,),
            {"emulator_address": self.emulator_address, "google_host": host, "log": self.log},
        )
        try:
            handler(tunnel, self.client_address, self.server)
        except (ssl.SSLError, OSError):
            pass
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


class _GoogleApiHandler(http.server.BaseHTTPRequestHandler):
    """One TLS tunnel's HTTP/1.1 requests, each forwarded to the emulator."""

    protocol_version = "HTTP/1.1"  # keep-alive, and `Expect: 100-continue` answered
    emulator_address: tuple[str, int]
    google_host: str
    log: list[str]

    def do_GET(self) -> None:
        self._forward()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers
                pass
            return body
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        body = self._body()
        method, path = self.command, self.path
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = self.emulator_host
        media_upload = self._empty_media_upload(method, path, body)
        if media_upload:
            status, reason, answer_headers, answer = self._upload_empty(*media_upload)
        else:
            status, reason, answer_headers, answer = self._ask(method, path, headers, body)
        self.log.append(f"{self.command} {self.google_host}{self.path} -> {status}")
        self.send_response(status, reason)
        for name, value in answer_headers:
            if name.lower() in _HOP_BY_HOP:
                continue
            if name.lower() == "location":
                value = value.replace(
                    f"http://{self.emulator_host}/", f"https://{self.google_host}/"
                )
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    @property
    def emulator_host(self) -> str:
        return "{}:{}".format(*self.emulator_address)

    def _empty_media_upload(
        self, method: str, path: str, body: bytes
    ) -> tuple[str, str, str | None] | None:
        """Bucket, object name (quoted) and `ifGenerationMatch` of an empty media upload, else
        None."""
        parsed = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(parsed.query)
        prefix = "/upload/storage/v1/b/"
        if body or method != "POST" or query.get("uploadType") != ["media"]:
            return None
        if not parsed.path.startswith(prefix) or not parsed.path.endswith("/o"):
            return None
        bucket = parsed.path[len(prefix) : -len("/o")]
        name = urllib.parse.quote(query["name"][0], safe="")
        return bucket, name, (query.get("ifGenerationMatch") or [None])[0]

    def _upload_empty(
        self, bucket: str, name: str, if_generation_match: str | None
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """An empty object written as the XML API's `PUT /BUCKET/OBJECT`, its precondition
        checked first as GCS checks it (412 when the generation differs, 0 meaning none), and
        answered with the object's resource, as a media upload is."""
        host = {"Host": self.emulator_host}
        metadata = f"/storage/v1/b/{bucket}/o/{name}"
        if if_generation_match is not None:
            status, reason, headers, answer = self._ask("GET", metadata, host, b"")
            if status not in (200, 404):
                return status, reason, headers, answer
            generation = str(json.loads(answer)["generation"]) if status == 200 else "0"
            if generation != if_generation_match:
                message = "At least one of the pre-conditions you specified did not hold."
                error = {"error": {"code": 412, "message": message}}
                return 412, "Precondition Failed", [], json.dumps(error).encode()
        status, reason, headers, answer = self._ask("PUT", f"/{bucket}/{name}", host, b"")
        if status != 200:
            return status, reason, headers, answer
        return self._ask("GET", metadata, host, b"")

    def _ask(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self.emulator_address, timeout=60)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            answer = response.read()
            return response.status, response.reason, response.getheaders(), answer
        except (OSError, http.client.HTTPException) as err:
            message = json.dumps({"error": {"code": 502, "message": f"emulator: {err}"}})
            return 502, "Bad Gateway", [("Content-Type", "application/json")], message.encode()
        finally:
            connection.close()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass
