"""Name rules of the API server's validation, worded as it words them: DNS labels and
subdomains (object, device and node names), driver and pool names, qualified names (attribute
and capacity names), and ``field.Path.Key`` with validateMap's truncation of long keys."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from . import field as fe

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_C_IDENTIFIER_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used "
    "for validation is '[A-Za-z_][A-Za-z0-9_]*')"
)


def _rfc1123_errors(path: str, value: str, limit: int, pattern: re.Pattern[str], message: str) -> list[str]:
    errs = []
    if len(value) > limit:
        errs.append(fe.invalid(path, value, f"must be no more than {limit} characters"))
    if not pattern.match(value):
        errs.append(fe.invalid(path, value, message))
    return errs


def dns_label_errors(path: str, value: Any) -> list[str]:
    """Required, an RFC 1123 label (device names)."""
    if not isinstance(value, str) or not value:
        return [fe.required(path)]
    return _rfc1123_errors(path, value, 63, _DNS_LABEL, _LABEL_MSG)


def dns_subdomain_errors(path: str, value: str) -> list[str]:
    """An RFC 1123 subdomain (object, node and pool names)."""
    return _rfc1123_errors(path, value, 253, DNS_SUBDOMAIN, SUBDOMAIN_MSG)


def _bounded_subdomains(path: str, value: Any, limit: int, parts: Callable[[str], list[str]]) -> list[str]:
    """Required, at most ``limit`` bytes, and each of ``parts(value)`` a DNS subdomain."""
    if not isinstance(value, str) or not value:
        return [fe.required(path)]
    errs = []
    if len(value) > limit:
        errs.append(fe.too_long(path, limit))
    for part in parts(value):
        errs.extend(dns_subdomain_errors(path, part))
    return errs


def driver_name_errors(path: str, value: Any) -> list[str]:
    """``validateDriverName``: required, <= 63, a DNS subdomain (checked lower-cased)."""
    return _bounded_subdomains(path, value, 63, lambda name: [name.lower()])


def pool_name_errors(path: str, value: Any) -> list[str]:
    """``validatePoolName``: required, <= 253, each ``/``-separated part a DNS subdomain."""
    return _bounded_subdomains(path, value, 253, lambda name: name.split("/"))


def qualified_name_errors(path: str, name: str) -> list[str]:
    """``validateQualifiedName`` for attribute and capacity names."""
    if not name:
        return [fe.required(path, "name required")]
    parts = name.split("/")
    errs: list[str] = []

    def c_identifier(ident: str) -> None:
        if len(ident) > 32:
            errs.append(fe.too_long(path, 32))
        if not _C_IDENTIFIER.match(ident):
            errs.append(fe.invalid(path, ident, _C_IDENTIFIER_MSG))

    if len(parts) == 1:
        c_identifier(parts[0])
    elif len(parts) == 2:
        if not parts[0]:
            errs.append(fe.required(path, "the domain must not be empty"))
        else:
            errs.extend(driver_name_errors(path, parts[0]))
        if not parts[1]:
            errs.append(fe.required(path, "the name must not be empty"))
        else:
            c_identifier(parts[1])
    else:
        errs.append(fe.invalid(path, name, "must be a C identifier, optionally prefixed with a DNS subdomain and '/'"))
    return errs


def key_path(path: str, key: str) -> str:
    """``field.Path.Key`` with validateMap's truncation of long keys (domain + 1 + id = 96)."""
    limit = 63 + 1 + 32
    if len(key) > limit:
        remaining = limit - 3
        key = key[: (remaining + 1) // 2] + "..." + key[len(key) - remaining // 2 :]
    return f"{path}[{key}]"
