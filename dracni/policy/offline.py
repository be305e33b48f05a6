"""The tenant policy without a node: what ``dracni validate`` can tell before any pod runs.

The same rules as prepare (``claims.resolve``), minus what needs the allocation: which device
the scheduler picks (the device binding) and, unless the DeviceClasses are given too, which
networks a class defines.  When they are given, a claim's choice is checked per class, as
prepare does: only the networks of the class its request names apply, and a claim naming no
``network`` gets that class's last one (prepare's default), so its knobs are checked against it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from dracni.params import DeviceParameters, ParameterError, validate_parameters

from .config import FULL, TenantPolicy
from .rules import refuse
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
    classes: tuple[str, ...] = ()  # a DeviceClass's own name, or the classes of the requests a claim config covers


def _request_classes(devices: object) -> dict[str, set[str]]:
    """The DeviceClasses each request (and ``request/sub``) names, in v1 and v1beta1/2 forms."""
    classes: dict[str, set[str]] = {}
    for request in (devices.get("requests") if isinstance(devices, dict) else None) or []:
        if not isinstance(request, dict) or not isinstance(request.get("name"), str):
            continue
        name, exactly = request["name"], request.get("exactly")
        own = (exactly if isinstance(exactly, dict) else request).get("deviceClassName")
        mine = classes.setdefault(name, set())
        if isinstance(own, str):
            mine.add(own)
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict) and isinstance(sub.get("deviceClassName"), str):
                mine.add(sub["deviceClassName"])
                classes.setdefault(f"{name}/{sub.get('name')}", set()).add(sub["deviceClassName"])
    return classes


def _covered(config: dict[str, object], requests: dict[str, set[str]]) -> tuple[str, ...]:
    """The classes of the requests ``config`` applies to (all requests when it names none)."""
    named = config.get("requests")
    names = named if isinstance(named, list) and named else [r for r in requests if "/" not in r]
    return tuple(sorted({c for name in names if isinstance(name, str) for c in requests.get(name, ())}))


def configs_in(doc: object, driver: str, origin: str) -> Iterator[FoundConfig]:
    """The driver's configs of a DeviceClass, ResourceClaim(Template) or bare parameters doc."""
    if not isinstance(doc, dict):
        yield FoundConfig(origin, doc, "FromClaim")
        return
    kind = doc.get("kind")
    meta = doc.get("metadata") or {}
    name = f"{meta.get('namespace') or 'default'}/{meta.get('name')}" if kind != "DeviceClass" else meta.get("name")
    requests: dict[str, set[str]] = {}
    if kind == "DeviceClass":
        configs, source = (doc.get("spec") or {}).get("config") or [], SOURCE_CLASS
    elif kind == "ResourceClaimTemplate":
        devices = ((doc.get("spec") or {}).get("spec") or {}).get("devices") or {}
        configs, source, requests = devices.get("config") or [], None, _request_classes(devices)
    elif kind == "ResourceClaim":
        allocated = ((doc.get("status") or {}).get("allocation") or {}).get("devices") or {}
        devices = (doc.get("spec") or {}).get("devices") or {}
        configs = allocated.get("config") or devices.get("config") or []
        source, requests = None, _request_classes(devices)
    elif kind in PARAMETER_KINDS or kind is None or str(doc.get("apiVersion")).startswith(PARAMETER_GROUPS):
        yield FoundConfig(origin, doc, "FromClaim")
        return
    else:  # another Kubernetes object (a Pod next to its templates): nothing of ours
        return
    for index, config in enumerate(configs):
        opaque = config.get("opaque") if isinstance(config, dict) else None
        if not isinstance(opaque, dict) or opaque.get("driver") != driver:
            continue
        where = f"{kind} {name} config[{index}]"
        classes = (str(name),) if kind == "DeviceClass" else _covered(config, requests)
        yield FoundConfig(where, opaque.get("parameters"), source or config.get("source") or "FromClaim", classes)


def check_found(found: FoundConfig, policy: TenantPolicy, networks: dict[str, list[DeviceParameters]]) -> None:
    """Raise ParameterError when ``found`` breaks a rule that can be checked offline.

    ``networks``: the networks of the DeviceClasses given, per class name, in their order
    (``class_networks``).  A claim config is checked against the networks of the classes of
    the requests it covers; when none of those classes is given (a bare parameters file, or a
    class defined elsewhere), against every network given, by name; with none given, not at all.
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
    known = [c for c in found.classes if c in networks]
    if params["config"] is not None:
        if policy.claim_configs == FULL and any(networks[c] for c in known):  # as claims.resolve._attachment
            raise refuse(
                "parameters.config", "a claim config cannot replace the DeviceClass's network", "classPrecedence"
            )
        check_claim_config(params, policy, "parameters")
        return
    check_profile_knobs(params, "parameters")
    for name in known:  # each class the config covers, as prepare resolves each request
        _check_choice(params, networks[name], f" for DeviceClass {name}, the class of its request")
    if known or not networks or params["network"] is None:
        return
    every = {n["config"]["name"]: n for listed in networks.values() for n in listed if n["config"] is not None}
    _check_choice(params, list(every.values()), "")


def _check_choice(params: DeviceParameters, networks: list[DeviceParameters], scope: str) -> None:
    """As ``claims.resolve._chosen_network``: the named network, or the last one, with the knobs.

    ``scope`` ends the message: which class's networks were the choices ("" for all given).
    """
    name = params["network"]
    by_name = {n["config"]["name"]: n for n in networks if n["config"] is not None}
    if name is not None and name not in by_name:
        listed = ", ".join(sorted(by_name))
        raise ParameterError(
            "parameters.network", f'"{name}" is not a network of the DeviceClasses given (they have: {listed}){scope}'
        )
    apply_profile(by_name[name] if name is not None else networks[-1], params, "parameters")


def class_networks(found: list[FoundConfig]) -> dict[str, list[DeviceParameters]]:
    """The networks each given DeviceClass defines (the valid ones), by class name, in order."""
    networks: dict[str, list[DeviceParameters]] = {}
    for item in found:
        if item.source != SOURCE_CLASS or not item.classes:
            continue
        try:
            params = validate_parameters(item.parameters, where="class parameters")
        except ParameterError:
            continue
        if params["config"] is not None:
            for name in item.classes:
                networks.setdefault(name, []).append(params)
    return networks
