"""The pod annotation ``k8s.v1.cni.cncf.io/network-status``: dracni's entries and the merge.

Readers of secondary networks (apps, UIs, KubeVirt) find a pod's attachments in this annotation
(NPWG "Kubernetes Network Custom Resource Definition De-facto Standard" v1.3, section 5, "Network
Attachment Status Annotation"; k8snetworkplumbingwg/multi-net-spec).  Its value is a JSON list,
one map per attachment, whose keys and types are those of the Go type ``NetworkStatus`` in
k8snetworkplumbingwg/network-attachment-definition-client ``pkg/apis/k8s.cni.cncf.io/v1/types.go``:
``name`` (string), ``interface`` (string), ``ips`` ([]string), ``mac`` (string), ``mtu`` (int),
``default`` (bool), ``dns`` (``DNS``: ``nameservers``, ``domain``, ``search``, ``options``),
``device-info`` (``DeviceInfo``: ``type``, ``version``, ``pci.pci-address``), ``gateway``.

- **Bare addresses.**  ``ips`` holds ``10.0.0.5``, not ``10.0.0.5/24``: Multus fills it with
  ``ipconfig.Address.IP.String()`` (network-attachment-definition-client ``pkg/utils/
  net-attach-def.go CreateNetworkStatus``), so the readers in the field (KubeVirt, consoles)
  were written against bare addresses.  The spec's own example (section 5.4) shows CIDRs;
  dracni follows Multus and the Go client (the prefix is in the claim's ``networkData``).
- **``default: false``** is written although the Go type omits a false one (``omitempty``): the
  spec calls the key required (5.3.5), and a Go reader reads both the same.
- **``dns``** is always written, as the Go encoder writes the struct (``omitempty`` does not omit
  a struct), with the CNI result's non-empty keys.
- **``device-info``** (``type: pci``, ``version: 1.1.0``, ``pci.pci-address``) is written for an
  attachment of a NIC this node offers exclusively and whose PCI address it knows (a host-device
  passthrough; the device-info spec of the NPWG, v1.1.0, as SR-IOV's device plugin writes it).
- **No ``gateway``**: dracni never makes an attachment the pod's default route on its own, and
  Multus only writes it for the attachment holding it.

**Names and ownership.**  An entry's ``name`` is ``<claim namespace>/<claim name>/<request>``:
three segments, where a NetworkAttachmentDefinition's (Multus's ``<namespace>/<name>``) and the
default network's have at most two.  When it rewrites a pod's annotation for a claim, dracni
replaces exactly the entries whose name starts with ``<claim namespace>/<claim name>/``, and
keeps every other entry as it is, in its place (the default network's, other claims', Multus's).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..status.entries import _attachment_index, fact_ips

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..state.records import DeviceFact

ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
#: DeviceInfo.version: the NPWG device-info specification this shape follows.
DEVICE_INFO_VERSION = "1.1.0"

Status = dict[str, Any]


def owned_prefix(namespace: str, claim: str) -> str:
    """The name prefix of the entries dracni writes for a claim (see the module docstring)."""
    return f"{namespace}/{claim}/"


def entry_name(namespace: str, claim: str, request: str) -> str:
    return owned_prefix(namespace, claim) + request


def _dns(result: Any) -> dict[str, Any]:
    """The ``DNS`` of the CNI result: its non-empty keys (Go ``omitempty``), strings only."""
    dns = result.get("dns") if isinstance(result, dict) else None
    out: dict[str, Any] = {}
    if not isinstance(dns, dict):
        return out
    for key in ("nameservers", "search", "options"):
        values = [v for v in dns.get(key) or [] if isinstance(v, str)] if isinstance(dns.get(key), list) else []
        if values:
            out[key] = values
    if isinstance(dns.get("domain"), str) and dns["domain"]:
        out["domain"] = dns["domain"]
    return out


def network_status_entry(
    fact: DeviceFact, namespace: str, claim: str, pci_of: Callable[[str, str], str | None] | None = None
) -> Status:
    """One ``NetworkStatus`` map of a ready attachment (field names and types as the Go type)."""
    result = fact.get("result")
    if_name = fact.get("ifName") or ""
    entry: Status = {"name": entry_name(namespace, claim, fact.get("request") or "")}
    if if_name:
        entry["interface"] = if_name
    ips = [ip.split("/", 1)[0] for ip in fact_ips(fact)]
    if ips:
        entry["ips"] = ips
    index = _attachment_index(result, if_name)
    iface = result["interfaces"][index] if index is not None and isinstance(result, dict) else {}
    if isinstance(iface.get("mac"), str) and iface["mac"]:
        entry["mac"] = iface["mac"]
    mtu = iface.get("mtu")
    if isinstance(mtu, int) and not isinstance(mtu, bool) and mtu > 0:
        entry["mtu"] = mtu
    entry["default"] = False
    entry["dns"] = _dns(result)
    pci = pci_of(str(fact.get("pool") or ""), str(fact.get("device") or "")) if pci_of else None
    if pci:
        entry["device-info"] = {"type": "pci", "version": DEVICE_INFO_VERSION, "pci": {"pci-address": pci}}
    return entry


def pod_entries(
    facts: Iterable[DeviceFact],
    namespace: str,
    claim: str,
    pci_of: Callable[[str, str], str | None] | None = None,
) -> dict[str, tuple[str, list[Status]]]:
    """pod UID -> (pod name, its entries for this claim): the ready attachments only (a failed
    ADD or a Detached persistent attachment has no interface in the pod)."""
    out: dict[str, tuple[str, list[Status]]] = {}
    for fact in facts:
        uid, name = fact.get("podUID"), fact.get("podName")
        if not fact.get("ready") or not uid or not name:
            continue
        out.setdefault(uid, (name, []))[1].append(network_status_entry(fact, namespace, claim, pci_of))
    for _, entries in out.values():
        entries.sort(key=lambda e: (e["name"], e.get("interface") or ""))
    return out


class UnreadableAnnotation(ValueError):
    """The pod's annotation is not a JSON list: dracni cannot keep the others' entries in it."""


def merged(current: str | None, prefix: str, ours: list[Status]) -> str | None:
    """The annotation's new value: ``current``'s entries without the ones named ``prefix...``,
    then ``ours``; None when nothing is left (the annotation goes)."""
    kept: list[Any] = []
    if current:
        try:
            parsed = json.loads(current)
        except ValueError as exc:
            raise UnreadableAnnotation(f"{ANNOTATION} is not JSON: {exc}") from None
        if not isinstance(parsed, list):
            raise UnreadableAnnotation(f"{ANNOTATION} is not a JSON list")
        kept = [e for e in parsed if not (isinstance(e, dict) and str(e.get("name") or "").startswith(prefix))]
    entries = kept + ours
    if not entries:
        return None
    return json.dumps(entries, indent=4)
