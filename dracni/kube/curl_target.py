"""Where the service's requests go and how, for libcurl: the kubernetes client's
``Configuration`` (kubeconfig or in-cluster) read as the client's own REST layer reads it
(``RESTClientObject.__init__``: the server's URL, TLS, client certificates, the name the
server's certificate is checked against, proxies), turned into the options every libcurl
handle of ``kube/transport.py`` starts with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pycurl

from .client_modules import import_client

import_client()  # before any other kubernetes import: see client_modules
from kubernetes.client.configuration import Configuration  # noqa: E402
from kubernetes.client.rest import should_bypass_proxies  # noqa: E402


@dataclass(frozen=True)
class CurlTarget:
    """Where requests go and how (``RESTClientObject.__init__``'s reading of the configuration,
    for libcurl): the URL prefix, TLS, proxy."""

    url: str
    options: tuple[tuple[int, Any], ...]

    @classmethod
    def of(cls, configuration: Configuration, *, connect_timeout: int) -> CurlTarget:
        host = configuration.host.rstrip("/")
        options: list[tuple[int, Any]] = [
            (pycurl.NOSIGNAL, 1),  # threads: no SIGALRM for name resolution timeouts
            (pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1),
            (pycurl.CONNECTTIMEOUT, connect_timeout),
            (pycurl.TCP_KEEPALIVE, 1),
            (pycurl.PATH_AS_IS, 1),  # the paths are quoted already
        ]
        if configuration.verify_ssl:
            if configuration.ssl_ca_cert:
                options.append((pycurl.CAINFO, configuration.ssl_ca_cert))
            if configuration.ca_cert_data:
                options.append((pycurl.CAINFO_BLOB, _text(configuration.ca_cert_data)))
        else:
            options += [(pycurl.SSL_VERIFYPEER, 0), (pycurl.SSL_VERIFYHOST, 0)]
        if configuration.cert_file:
            options.append((pycurl.SSLCERT, configuration.cert_file))
        if configuration.key_file:
            options.append((pycurl.SSLKEY, configuration.key_file))
        if configuration.assert_hostname is False:
            options.append((pycurl.SSL_VERIFYHOST, 0))
        # The name the server's certificate is checked against (urllib3's server_hostname and
        # assert_hostname): the URL carries it, CONNECT_TO sends the connection to the real host.
        name = configuration.tls_server_name or (
            configuration.assert_hostname if isinstance(configuration.assert_hostname, str) else None
        )
        if name:
            parts = urlsplit(host)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            options.append((pycurl.CONNECT_TO, [f"{name}:{port}:{parts.hostname}:{port}"]))
            host = f"{parts.scheme}://{name}:{port}{parts.path}"
        if configuration.proxy and not should_bypass_proxies(configuration.host, configuration.no_proxy or ""):
            options.append((pycurl.PROXY, configuration.proxy))
            if configuration.proxy_headers:
                options.append((pycurl.HEADEROPT, pycurl.HEADER_SEPARATE))
                options.append((pycurl.PROXYHEADER, [f"{k}: {v}" for k, v in configuration.proxy_headers.items()]))
        else:
            options.append((pycurl.PROXY, ""))  # not the environment's: the configuration said
        return cls(host, tuple(options))

    def new_handle(self) -> pycurl.Curl:
        handle = pycurl.Curl()
        for option, value in self.options:
            handle.setopt(option, value)
        return handle


def _text(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data
