"""The tenant policy without a node: what ``dracni validate`` can tell before any pod runs.

The same rules as prepare (``claims.resolve``), minus what needs the allocation: which device
the scheduler picks (the device binding) and, unless the DeviceClasses are given too, which
networks a class defines.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from dracni.params import DeviceParameters, ParameterError, validate_parameters

from .config import TenantPolicy
from .tenant import apply_profile, check_any_source, check_claim_config, check_profile_knobs

SOURCE_CLASS = "FromClass"
PARAMETER_KINDS = ("NetworkAttachment", "CNI")  # a bare parameters document, by kind or group
PARAMETER_GROUPS = ("dracni.io/", "cni.networking.x-k8s.io/")


@dataclass(frozen=True)
class FoundConfig:
    """One opaque config of the driver found in a manifest."""

    where: str  # e.g. "ResourceClaim default/net config[0]"
    parameters: object
    source: str  # FromClass (the administrator's) or FromClaim (tenant input)


def configs_in(doc: object, driver: str, origin: str) -> Iterator[FoundConfig]:
    """The driver's configs of a DeviceClass, ResourceClaim(Template) or bare parameters doc."""
    if not isinstance(doc, dict):
        yield FoundConfig(origin, doc, "FromClaim")
        return
    kind = doc.get("kind")
    meta = doc.get("metadata") or {}
    name = f"{meta.get('namespace') or 'default'}/{meta.get('name')}" if kind != "DeviceClass" else meta.get("name")
    if kind == "DeviceClass":
        configs, source = (doc.get("spec") or {}).get("config") or [], SOURCE_CLASS
    elif kind == "ResourceClaimTemplate":
        configs, source = ((doc.get("spec") or {}).get("spec") or {}).get("devices", {}).get("config") or [], None
    elif kind == "ResourceClaim":
        allocated = ((doc.get("status") or {}).get("allocation") or {}).get("devices") or {}
        configs = allocated.get("config") or (doc.get("spec") or {}).get("devices", {}).get("config") or []
        source = None
    elif kind in PARAMETER_KINDS or kind is None or str(doc.get("apiVersion")).startswith(PARAMETER_GROUPS):
        yield FoundConfig(origin, doc, "FromClaim")
        return
    else:  # another Kubernetes object (a Pod next to its templates): nothing of ours
        return
    for index, config in enumerate(configs):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != driver:
            continue
        yield FoundConfig(
            f"{kind} {name} config[{index}]", opaque.get("parameters"), source or config.get("source") or "FromClaim"
        )


def check_found(found: FoundConfig, policy: TenantPolicy, networks: dict[str, DeviceParameters]) -> None:
    """Raise ParameterError when ``found`` breaks a rule that can be checked offline.

    ``networks``: the DeviceClass networks known (by name); a profile naming another one is
    only reported when some are known.
    """
    if found.source == SOURCE_CLASS:
        params = validate_parameters(found.parameters, where="class parameters")
        if params["config"] is None:
            raise ParameterError("class parameters.config", "a DeviceClass config must define its network (config)")
        check_any_source(params, "class parameters")
        if params.get("addressPool") is not None:
            from ..pools.model import check_pool_network

            check_pool_network(params, "class parameters")
        return
    params = validate_parameters(found.parameters)
    if params["config"] is not None:
        check_claim_config(params, policy, "parameters")
        return
    check_profile_knobs(params, "parameters")
    if not networks:
        return
    name = params["network"]
    if name is None:
        return
    if name not in networks:
        listed = ", ".join(sorted(networks))
        raise ParameterError(
            "parameters.network", f'"{name}" is not a network of the DeviceClasses given (they have: {listed})'
        )
    apply_profile(networks[name], params, "parameters")


def class_networks(found: list[FoundConfig]) -> dict[str, DeviceParameters]:
    """The networks the given DeviceClass configs define, by name (the valid ones)."""
    networks: dict[str, DeviceParameters] = {}
    for item in found:
        if item.source != SOURCE_CLASS:
            continue
        try:
            params = validate_parameters(item.parameters, where="class parameters")
        except ParameterError:
            continue
        if params["config"] is not None:
            networks[params["config"]["name"]] = params
    return networks
