"""Turn an allocated ResourceClaim into the PreparedClaim record the CNI plugin reads.

Works on the API's camelCase JSON form of resource.k8s.io v1, v1beta1 and v1beta2: the
allocation results, the allocation's config and ``status.reservedFor`` have the same shape in
all three.  Only this driver's opaque configs count, and a config naming request ``req`` also
applies to the subrequests ``req/<sub>`` (docs/contracts.md section 3).

Trust decides what each config may do (docs/security.md).  The DeviceClass configs
(``source: FromClass``) are the administrator's networks: without a claim config the last one
applies as it is.  A claim config (``FromClaim``, tenant input) either chooses one of them by
name and sets per-attachment fields (the profile form), or, where no class config covers the
request and the tenant policy allows full claim configs, brings its own network under the
policy's rules.  Either way the allocated device binds the network (``policy.binding``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from dracni.clock import now_rfc3339
from dracni.kubelet.guards import ClaimRefused, driver_allocation
from dracni.params import DeviceParameters, ParameterError, validate_parameters
from dracni.policy.binding import DeviceLookup, bind_to_device
from dracni.policy.config import FULL, TenantPolicy
from dracni.policy.rules import refuse
from dracni.policy.tenant import apply_profile, check_any_source, check_claim_config, manage_ipam_data
from dracni.pools.model import check_pool_network
from dracni.state.facts import claim_ref
from dracni.state.records import new_prepared_claim

if TYPE_CHECKING:
    from dracni.state.records import DeviceSpec, PodRef, PreparedClaim

SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"


class ClaimError(ValueError):
    """A claim that cannot be prepared; the message says what to fix.

    ``field`` names the offending parameter field when the parameters are invalid.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def resolve_claim(
    claim: dict[str, Any],
    *,
    driver: str,
    node: str | None = None,
    policy: TenantPolicy | None = None,
    devices: DeviceLookup | None = None,
    ipam_dir: str | None = None,
    source: str | None = None,
    prepared_at: str | None = None,
) -> PreparedClaim:
    """Build the PreparedClaim record (``spec/state-records.schema.json``) for ``claim``.

    ``node`` is accepted for the callers' convenience but does not filter results: the
    allocation's nodeSelector already tied the claim to a node, and pool names need not be
    node names.  ``policy`` is the tenant policy (None: the safe defaults); ``devices`` finds
    the NIC behind an allocated device (None: none can be found, so a config that needs it
    fails); ``ipam_dir`` is the data directory dracni gives the IPAM of claim configs.
    ``prepared_at`` overrides the timestamp (RFC 3339, UTC) for tests.
    """
    uid, namespace, name = _identity(claim)
    label = f"claim {namespace}/{name}"
    try:
        allocation, results = driver_allocation(claim, driver, label)
    except ClaimRefused as exc:
        raise ClaimError(str(exc)) from None
    pods = _reserved_pods(claim, label)
    configs = _driver_configs(claim, allocation, driver)
    rules = _Rules(policy or TenantPolicy(), devices, ipam_dir)
    specs = [_device(result, configs, driver, rules, label) for result in results]
    _check_unique_ifnames(specs, label)
    return new_prepared_claim(
        claim_ref(uid, namespace, name),
        driver=driver,
        source=source,
        prepared_at=prepared_at or now_rfc3339(),
        pods=pods,
        devices=specs,
    )


# -- claim parts -------------------------------------------------------------------------


def _identity(claim: Any) -> tuple[str, str, str]:
    meta = claim.get("metadata") if isinstance(claim, dict) else None
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ClaimError("claim: metadata.name is missing; is this a ResourceClaim object?")
    namespace = meta.get("namespace") or "default"
    if not meta.get("uid"):
        raise ClaimError(f"claim {namespace}/{meta['name']}: metadata.uid is missing")
    return str(meta["uid"]), str(namespace), str(meta["name"])


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _reserved_pods(claim: dict[str, Any], label: str) -> list[PodRef]:
    pods: list[PodRef] = []
    for ref in _mapping(claim.get("status")).get("reservedFor") or []:
        if isinstance(ref, dict) and ref.get("resource") == "pods" and not ref.get("apiGroup"):
            pods.append({"uid": str(ref.get("uid") or ""), "name": str(ref.get("name") or "")})
    if not pods:
        raise ClaimError(
            f"{label}: not reserved for any pod (status.reservedFor has no entry with resource: pods); "
            "a claim is prepared for the pods that use it"
        )
    return pods


# -- config precedence -------------------------------------------------------------------


def _driver_configs(claim: dict[str, Any], allocation: dict[str, Any], driver: str) -> list[dict[str, Any]]:
    """This driver's opaque configs, class configs first, claim configs after, order kept.

    Without any allocation config (some hand-written clusterless manifests), the claim's
    ``spec.devices.config`` stands in as claim configs.
    """
    configs = _mapping(allocation.get("devices")).get("config")
    if not configs:
        spec_configs = _mapping(_mapping(claim.get("spec")).get("devices")).get("config") or []
        configs = [{**c, "source": SOURCE_CLAIM} for c in spec_configs if isinstance(c, dict)]
    ours = [c for c in configs if isinstance(c, dict) and _mapping(c.get("opaque")).get("driver") == driver]
    return sorted(ours, key=lambda c: 0 if c.get("source") == SOURCE_CLASS else 1)


def config_applies(requests: list[str] | None, request: str) -> bool:
    """Whether a config with ``requests`` applies to the result of ``request`` (may be req/sub)."""
    if not requests:
        return True
    parent = request.split("/", 1)[0]
    return request in requests or parent in requests


class _Rules(NamedTuple):
    policy: TenantPolicy
    devices: DeviceLookup | None
    ipam_dir: str | None


def _device(
    result: dict[str, Any], configs: list[dict[str, Any]], driver: str, rules: _Rules, label: str
) -> DeviceSpec:
    request = result["request"]
    where = f"{label}: request {request}"
    try:
        attachment = _attachment(result, configs, driver, rules, where)
    except ClassConfigError as exc:
        raise ClaimError(f"{where}: the DeviceClass's config: {exc}", field=exc.field) from exc
    except ParameterError as exc:
        raise ClaimError(f"{where}: {exc}", field=exc.field) from exc
    assert attachment["config"] is not None
    spec: DeviceSpec = {
        "request": request,
        "pool": result["pool"],
        "device": result["device"],
        "shareID": result.get("shareID") or None,
        "ifName": attachment["ifName"],
        "config": attachment["config"],
        "runtimeConfig": attachment["runtimeConfig"],
        "capabilities": attachment["capabilities"],
        "persistentIPs": attachment["persistentIPs"],
        "ipamClaim": attachment["ipamClaim"],
    }
    if attachment.get("addressPool") is not None:
        spec["addressPool"] = attachment["addressPool"]
    return spec


class ClassConfigError(ParameterError):
    """The administrator's network (a FromClass config) is what is wrong, not the claim."""


def _attachment(
    result: dict[str, Any], configs: list[dict[str, Any]], driver: str, rules: _Rules, where: str
) -> DeviceParameters:
    """The parameters the request's device gets, decided by who wrote which config."""
    request = result["request"]
    applicable = [c for c in configs if config_applies(c.get("requests"), request)]
    networks = [_class_network(c) for c in applicable if c.get("source") == SOURCE_CLASS]  # in order
    claim_configs = [c for c in applicable if c.get("source") != SOURCE_CLASS]
    wanted = validate_parameters(claim_configs[-1]["opaque"].get("parameters")) if claim_configs else None
    if wanted is None:
        if not networks:
            raise ClaimError(
                f"{where}: no opaque config for driver {driver}; add spec.devices.config with opaque.driver: {driver}"
            )
        attachment = networks[-1]
    elif wanted["config"] is not None:  # a claim's own network
        if networks and rules.policy.claim_configs == FULL:  # under profiles, claimConfigs refuses it
            raise refuse(
                "parameters.config", "a claim config cannot replace the DeviceClass's network", "classPrecedence"
            )
        check_claim_config(wanted, rules.policy, "parameters")
        attachment = wanted
    else:
        attachment = apply_profile(_chosen_network(networks, wanted["network"], driver), wanted, "parameters")
    tenant = wanted is not None and wanted["config"] is not None
    try:
        check_any_source(attachment, "parameters")
        bind_to_device(
            attachment,
            pool=result["pool"],
            device=result["device"],
            shared=bool(result.get("shareID")),
            tenant=tenant,
            lookup=rules.devices,
            where="parameters",
        )
    except ParameterError as exc:
        raise exc if tenant else ClassConfigError(exc.field, exc.reason) from None
    if tenant and rules.ipam_dir is not None:
        assert attachment["config"] is not None
        manage_ipam_data(attachment["config"], rules.ipam_dir)
    return attachment


def _class_network(config: dict[str, Any]) -> DeviceParameters:
    try:
        params = validate_parameters(config["opaque"].get("parameters"))
    except ParameterError as exc:
        raise ClassConfigError(exc.field, exc.reason) from None
    if params["config"] is None:
        raise ClassConfigError("parameters.config", "a DeviceClass config must define its network (config)")
    if params.get("addressPool") is not None:
        try:
            check_pool_network(params, "parameters")
        except ParameterError as exc:
            raise ClassConfigError(exc.field, exc.reason) from None
    return params


def _chosen_network(networks: list[DeviceParameters], name: str | None, driver: str) -> DeviceParameters:
    if not networks:
        raise ParameterError(
            "parameters.network",
            "the DeviceClass defines no network for this request (no opaque config of driver "
            f"{driver} with source FromClass); choose a DeviceClass that does",
        )
    if name is None:
        return networks[-1]
    by_name = {n["config"]["name"]: n for n in networks if n["config"] is not None}
    if name not in by_name:
        listed = ", ".join(sorted(by_name))
        raise ParameterError("parameters.network", f'"{name}" is not a network of the DeviceClass (it has: {listed})')
    return by_name[name]


def _check_unique_ifnames(devices: list[DeviceSpec], label: str) -> None:
    seen: dict[str, DeviceSpec] = {}
    for device in devices:
        if_name = device["ifName"]
        if if_name is None:
            continue
        if if_name in seen:
            first = seen[if_name]
            raise ClaimError(
                f"{label}: request {first['request']} (device {first['pool']}/{first['device']}) and "
                f"request {device['request']} (device {device['pool']}/{device['device']}) both use "
                f'ifName "{if_name}"; give each its own ifName, or leave ifName out to get the next free netN'
            )
        seen[if_name] = device
