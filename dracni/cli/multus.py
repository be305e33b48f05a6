"""Reading Multus's inputs as Multus reads them: the networks annotation, NADs, pod templates.

``dracni convert`` turns these into DRA objects; this module only reads, so that what convert
accepts is what Multus accepts, no more and no less (upstream, k8snetworkplumbingwg):

- the pod annotation ``k8s.v1.cni.cncf.io/networks`` (multus-cni pkg/k8sclient/k8sclient.go,
  ``parsePodNetworkAnnotation`` and ``parsePodNetworkObjectName``): when the text holds any of
  ``[``, ``{`` or ``"`` it is a JSON list of NetworkSelectionElement, else a comma list of
  ``[namespace/]name[@ifname]``, each part trimmed and a DNS-1123 label; a missing namespace is
  the pod's.  The element's JSON fields are the Go type's tags
  (network-attachment-definition-client pkg/apis/k8s.cni.cncf.io/v1/types.go,
  ``NetworkSelectionElement``); the pre-3.2 ``interfaceRequest`` stands for ``interface``.
- the NetworkAttachmentDefinition (same types.go, ``NetworkAttachmentDefinitionSpec``):
  ``spec.config`` is a JSON string, one plugin or a conflist; the annotation
  ``k8s.v1.cni.cncf.io/resourceName`` ties it to a device plugin's resource (SR-IOV).

A refusal raises ``Unreadable`` with the field it is about, for convert to report.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..macaddr import parse_mac

NETWORKS = "k8s.v1.cni.cncf.io/networks"
RESOURCE_NAME = "k8s.v1.cni.cncf.io/resourceName"
DEFAULT_NETWORK = "v1.multus-cni.io/default-network"
NAD_KIND = "NetworkAttachmentDefinition"
NAD_GROUP = "k8s.cni.cncf.io/"

#: parsePodNetworkObjectName's check of each part of the comma form.
_LABEL = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
#: The JSON form's fields dracni carries over, and the ones it cannot express.
CARRIED = ("name", "namespace", "interface", "interfaceRequest", "ips", "mac", "ipam-claim-reference")
NOT_EXPRESSIBLE = {
    "default-route": "dracni adds no default route through an attachment: put the route in the network's "
    "IPAM (routes) or a sbr plugin",
    "cni-args": "dracni passes no per-pod CNI args to the plugins",
    "portMappings": "dracni passes no per-pod port mappings (portmap reaches the node's ports)",
    "bandwidth": "dracni passes no per-pod bandwidth: set it in the network's bandwidth plugin",
    "infiniband-guid": "dracni sets no InfiniBand GUID",
}
#: Where the pod template sits in each workload kind (CronJob: the Job's template).
TEMPLATE_PATHS = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


class Unreadable(ValueError):
    """Input Multus would refuse, or that dracni cannot read; ``field`` names where."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True)
class Selection:
    """One element of a pod's networks annotation, with the fields dracni cannot carry."""

    index: int
    name: str
    namespace: str
    interface: str | None = None
    ips: tuple[str, ...] = ()
    mac: str | None = None
    ipam_claim: str | None = None
    dropped: tuple[tuple[str, str], ...] = field(default=())  # (JSON field, why it cannot be carried)


def parse_networks(text: str, namespace: str, where: str) -> list[Selection]:
    """The selections of an annotation value, as ``parsePodNetworkAnnotation`` reads it."""
    if any(c in text for c in '[{"'):
        try:
            elements = json.loads(text)
        except ValueError as exc:
            raise Unreadable(where, f"not the JSON list of network selection elements Multus reads: {exc}") from None
        if not isinstance(elements, list):
            raise Unreadable(where, "the JSON form must be a list of network selection elements (Multus refuses it)")
        return [_element(e, i, namespace, f"{where}[{i}]") for i, e in enumerate(elements)]
    return [_object_name(item.strip(), i, namespace, f"{where}[{i}]") for i, item in enumerate(text.split(","))]


def _object_name(item: str, index: int, namespace: str, where: str) -> Selection:
    """``[namespace/]name[@ifname]``, as ``parsePodNetworkObjectName`` splits and checks it."""
    slashed = item.split("/")
    if len(slashed) > 2:
        raise Unreadable(where, f"{item!r}: more than one '/' (Multus: invalid network object)")
    ns, rest = (slashed[0].strip(), slashed[1]) if len(slashed) == 2 else ("", slashed[0])
    at = rest.split("@")
    if len(at) > 2:
        raise Unreadable(where, f"{item!r}: more than one '@' (Multus: invalid network object)")
    name, ifname = at[0].strip(), (at[1].strip() if len(at) == 2 else "")
    for part in (ns, name, ifname):
        if part and not _LABEL.match(part):
            raise Unreadable(where, f"{item!r}: {part!r} is not a lower-case DNS-1123 label (Multus refuses it)")
    if not name:
        raise Unreadable(where, f"{item!r}: no network name")
    return Selection(index, name, ns or namespace, ifname or None)


def _element(element: Any, index: int, namespace: str, where: str) -> Selection:
    """One NetworkSelectionElement; every field dracni cannot carry is kept in ``dropped``."""
    if not isinstance(element, dict):
        raise Unreadable(where, "a network selection element must be a JSON object")
    name = element.get("name")
    if not isinstance(name, str) or not name:
        raise Unreadable(f"{where}.name", "missing: every network selection element names its network")
    interface = element.get("interface") or element.get("interfaceRequest")
    mac, ips = element.get("mac"), element.get("ips") or []
    if mac is not None and parse_mac(mac) is None:
        raise Unreadable(f"{where}.mac", f"{mac!r} is not a MAC Go's net.ParseMAC reads (Multus refuses it)")
    if not isinstance(ips, list) or not all(isinstance(ip, str) and _is_ip(ip) for ip in ips):
        raise Unreadable(f"{where}.ips", f"{ips!r}: each must be an IP address or CIDR (Multus refuses it)")
    for key in ("namespace", "interface", "interfaceRequest", "ipam-claim-reference"):
        if element.get(key) is not None and not isinstance(element[key], str):
            raise Unreadable(f"{where}.{key}", "must be a string")
    dropped = [(key, NOT_EXPRESSIBLE[key]) for key in sorted(element) if key in NOT_EXPRESSIBLE]
    dropped += [
        (key, "not a field Multus reads") for key in sorted(element) if key not in CARRIED + tuple(NOT_EXPRESSIBLE)
    ]
    return Selection(
        index,
        name,
        element.get("namespace") or namespace,
        interface or None,
        tuple(ips),
        mac,
        element.get("ipam-claim-reference") or None,
        tuple(dropped),
    )


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_interface(text) if "/" in text else ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def nad_config(nad: dict[str, Any]) -> dict[str, Any]:
    """The CNI configuration of a NAD: ``spec.config``, a JSON string (one plugin or a conflist),
    named after the NAD when it has no name, as Multus does (multus-cni pkg/k8sclient,
    ``getCNIConfigFromSpec``)."""
    raw = (nad.get("spec") or {}).get("config")
    if not raw:
        raise Unreadable(
            "spec.config",
            "empty: Multus then reads the network's config from a file on each node; put it in spec.config",
        )
    try:
        config = json.loads(raw) if isinstance(raw, str) else None
    except ValueError as exc:
        raise Unreadable("spec.config", f"not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise Unreadable("spec.config", "must be a JSON string holding a CNI config object")
    if not config.get("name"):
        config["name"] = (nad.get("metadata") or {}).get("name")
    return config


def is_nad(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == NAD_KIND and str(doc.get("apiVersion")).startswith(NAD_GROUP)


def pod_template(doc: Any) -> tuple[str, dict[str, Any]] | None:
    """The pod (template) of a workload, with its field path (``spec.template.`` or ``""``)."""
    if not isinstance(doc, dict) or doc.get("kind") not in TEMPLATE_PATHS:
        return None
    node: Any = doc
    for key in TEMPLATE_PATHS[doc["kind"]]:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    path = "".join(f"{key}." for key in TEMPLATE_PATHS[doc["kind"]])
    return path, node


def namespace_of(doc: dict[str, Any]) -> str:
    return (doc.get("metadata") or {}).get("namespace") or "default"


def documents(paths: list[str]) -> Iterator[str]:
    """The manifest files of ``paths`` (directories walked), in a stable order."""
    import os

    for path in paths:
        if not os.path.isdir(path):
            yield path
            continue
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".yaml", ".yml", ".json")):
                    yield os.path.join(root, name)
