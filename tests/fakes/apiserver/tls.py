"""The test API server's TLS: a CA and a serving certificate for 127.0.0.1, as a cluster's CA
signs kube-apiserver's (the in-cluster ``ca.crt`` a pod's service account mounts is that CA).

Made with the ``openssl`` command (Debian's openssl package) once per fake, into its directory.
Connections are accepted by the listening thread and their handshakes done in each request
thread, as Go's ``crypto/tls`` listener (``tls.NewListener``) accepts plainly and handshakes on
the connection's first read.
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class ServingCert:
    """The files of one fake's TLS: ``ca`` (what a client trusts), ``cert`` and ``key`` (the server's)."""

    ca: str
    cert: str
    key: str

    @classmethod
    def make(cls, directory: str) -> ServingCert:
        """A new CA and a certificate it signs for IP 127.0.0.1 and ``localhost``, in ``directory``."""
        files = cls(*(os.path.join(directory, name) for name in ("ca.crt", "apiserver.crt", "apiserver.key")))
        if all(os.path.exists(f) for f in (files.ca, files.cert, files.key)):
            return files
        ca_key = os.path.join(directory, "ca.key")
        csr = os.path.join(directory, "apiserver.csr")
        ext = os.path.join(directory, "apiserver.ext")
        with open(ext, "w", encoding="ascii") as fh:
            fh.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        for argv in (
            ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", ca_key,
             "-out", files.ca, "-days", "2", "-subj", "/CN=fake-cluster-ca"],
            ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", files.key,
             "-out", csr, "-subj", "/CN=kube-apiserver"],
            ["x509", "-req", "-in", csr, "-CA", files.ca, "-CAkey", ca_key, "-CAcreateserial", "-out", files.cert,
             "-days", "2", "-extfile", ext],
        ):  # fmt: skip
            subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)
        return files

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def accept_tls(listener: socket.socket, context: ssl.SSLContext) -> tuple[socket.socket, object]:
    """``socketserver.TCPServer.get_request`` over TLS: the handshake waits for the first read."""
    conn, address = listener.accept()
    return context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), address
