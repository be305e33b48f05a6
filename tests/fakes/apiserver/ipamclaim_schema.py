"""The IPAMClaim CRD as the fake serves it: upstream's definition
(k8snetworkplumbingwg/ipamclaims v1alpha1, shipped in ``spec/crds/ipamclaims.k8s.cni.cncf.io.yaml``)
read from the repository, and ``check_ips``, the one rule the fake adds on top of it (a
crd_status.Hook): every ``status.ips`` entry is a CIDR.

Upstream's ``ips`` items are plain strings; the rule is the test suite's, not the CRD's, and is
kept because OVN-Kubernetes writes CIDRs (``10.0.0.5/24``) and so must dracni: a bare address
there would be read back wrong by the plugins that consume the claim.  Everything else (pruning,
types, required fields, ``metav1.Condition``'s enum, patterns and lengths) comes from the CRD
through the generic path (crds.py, crd_schema.py).  The names below are the CRD's, for the tests
that compare the shipped file with what the fake prunes to."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import yaml

from . import field as fe
from .resources import Obj

#: The repository's copy of upstream's CRD.
CRD_PATH = Path(__file__).resolve().parents[3] / "spec" / "crds" / "ipamclaims.k8s.cni.cncf.io.yaml"


def load_crd() -> Obj:
    with open(CRD_PATH, encoding="utf-8") as fh:
        [crd] = [doc for doc in yaml.safe_load_all(fh) if doc]
    return dict(crd)


CRD = load_crd()
_SCHEMA: dict[str, Any] = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
_STATUS = _SCHEMA["properties"]["status"]
_CONDITION = _STATUS["properties"]["conditions"]["items"]
_IPAM_SPEC_FIELDS = tuple(_SCHEMA["properties"]["spec"]["properties"])
_IPAM_STATUS_FIELDS = tuple(_STATUS["properties"])
_CONDITION_FIELDS = tuple(_CONDITION["properties"])
_CONDITION_TYPE = re.compile(_CONDITION["properties"]["type"]["pattern"])
_CONDITION_REASON = re.compile(_CONDITION["properties"]["reason"]["pattern"])


def _is_cidr(value: str) -> bool:
    if "/" not in value:
        return False
    try:
        ipaddress.ip_interface(value)
    except ValueError:
        return False
    return True


def check_ips(obj: Obj) -> list[str]:
    """The fake's own rule: each string in ``status.ips`` is an address with a prefix length."""
    status = obj.get("status")
    ips = status.get("ips") if isinstance(status, dict) else None
    if not isinstance(ips, list):
        return []
    return [
        fe.invalid(
            f"status.ips[{index}]",
            ip,
            "must be a CIDR: an IP address with a prefix length (e.g. 10.0.0.5/24 or fd00::5/64)",
        )
        for index, ip in enumerate(ips)
        if isinstance(ip, str) and not _is_cidr(ip)
    ]
