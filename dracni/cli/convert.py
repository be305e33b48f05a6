"""``dracni convert``: Multus NetworkAttachmentDefinitions and annotated workloads to DRA objects.

Files in, files out, never a cluster.  Each NAD becomes a DeviceClass network (its single
plugin or conflist as the class's ``NetworkAttachment`` config; the administrator reviews and
applies these), each pod's choice of a network (``k8s.v1.cni.cncf.io/networks``: ifName, ips,
mac, ipam-claim-reference) a ResourceClaimTemplate, and each workload gets ``resourceClaims``
instead of the annotation.  The reading of Multus's forms is ``cli.multus``'s.

A NAD is written by anyone who may edit its namespace, so its config is held to the tenant
policy (the same checks as ``dracni validate``'s full claim configs) before it becomes a
class, which dracni trusts.  Everything that cannot be carried over is named, file, object and
field, and the exit is non-zero; what can be carried over is still written.  Output is sorted
and named from the input alone: the same input gives byte-identical files.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from .multus import (
    DEFAULT_NETWORK,
    NETWORKS,
    RESOURCE_NAME,
    Selection,
    Unreadable,
    documents,
    is_nad,
    nad_config,
    namespace_of,
    parse_networks,
    pod_template,
)
from .options import driver_option, policy_options

if TYPE_CHECKING:
    from ..params import DeviceParameters
    from ..policy.config import TenantPolicy

PARAMS_HEAD = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment"}
#: Keys that name the node's NIC; dracni binds the allocated one instead (rule deviceBinding).
DEVICE_KEYS = ("master", "device", "pciBusID", "hwaddr")
REQUEST = "net"
OUTPUTS = ("deviceclasses.yaml", "resourceclaimtemplates.yaml", "workloads.yaml")


@dataclass(frozen=True)
class Problem:
    """Something not carried over: where (file, object, field) and why."""

    file: str
    obj: str
    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.obj}: {self.field}: {self.reason}"


@dataclass
class Network:
    """A NAD's network as a DeviceClass (``None``: refused, see the problems)."""

    device_class: dict[str, Any] | None
    capabilities: frozenset[str] = frozenset()


@dataclass
class Result:
    files: dict[str, str]
    counts: dict[str, int]
    problems: list[Problem] = field(default_factory=list)


def convert(paths: list[str], policy: TenantPolicy, driver: str) -> Result:
    """The output files for the manifests at ``paths``, and every problem found."""
    from ..claims.manifests import ClaimSourceError, TooDeep, read_documents

    problems: list[Problem] = []
    nads: list[tuple[str, dict[str, Any]]] = []
    workloads: list[tuple[str, dict[str, Any]]] = []
    for path in documents(paths):
        try:
            docs = read_documents(path)
        except ClaimSourceError as exc:
            problems.append(Problem(path, "-", "-", str(exc)))
            continue
        for doc in docs:
            if isinstance(doc, TooDeep):
                problems.append(Problem(path, "-", "-", doc.message))
            elif is_nad(doc):
                nads.append((path, doc))
            elif pod_template(doc) is not None:
                workloads.append((path, doc))
    networks = {_key(doc): _network(path, doc, policy, driver, problems) for path, doc in nads}
    templates: dict[tuple[str, str], dict[str, Any]] = {}
    converted = []
    for path, doc in workloads:
        out = _workload(path, doc, networks, templates, driver, problems)
        if out is not None:
            converted.append(out)
    classes = [n.device_class for n in networks.values() if n.device_class is not None]
    _check_templates(classes, list(templates.values()), policy, driver, problems)
    made = (classes, list(templates.values()), converted)
    files = {name: _dump(objects) for name, objects in zip(OUTPUTS, made, strict=True)}
    counts = {name: len(objects) for name, objects in zip(OUTPUTS, made, strict=True)}
    return Result(files, counts, sorted(set(problems), key=str))


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return namespace_of(doc), str((doc.get("metadata") or {}).get("name"))


def _network(path: str, nad: dict[str, Any], policy: TenantPolicy, driver: str, problems: list[Problem]) -> Network:
    """The DeviceClass for ``nad``, or None with the reason among ``problems``."""
    from ..params import ParameterError, validate_parameters
    from ..policy.config import FULL
    from ..policy.tenant import check_claim_config

    namespace, name = _key(nad)
    obj = f"NetworkAttachmentDefinition {namespace}/{name}"
    resource = ((nad.get("metadata") or {}).get("annotations") or {}).get(RESOURCE_NAME)
    if resource:
        problems.append(
            Problem(
                path, obj, f'metadata.annotations["{RESOURCE_NAME}"]',
                f"{resource!r} is a device plugin's resource (SR-IOV): dracni uses no device plugin; offer the "
                "VFs as exclusive NICs (--nic-sharing=<VF names>=exclusive) and use a dracni host-device class "
                "(packaging/deploy/examples/host-device-network.yaml)",
            )
        )  # fmt: skip
        return Network(None)
    try:
        config = nad_config(nad)
    except Unreadable as exc:
        problems.append(Problem(path, obj, exc.field, exc.reason))
        return Network(None)
    listed = config.get("plugins")
    plugins: list[Any] = listed if isinstance(listed, list) else [config]
    nics = _strip_device_keys(config, plugins, path, obj, problems)
    params = {**PARAMS_HEAD, "config": config}
    try:
        checked = validate_parameters(params, where="spec")
        check_claim_config(_without_capabilities(checked), dataclasses.replace(policy, claim_configs=FULL), "spec")
    except ParameterError as exc:
        problems.append(Problem(path, obj, exc.field, f"{exc.reason} (the tenant policy, as dracni validate)"))
        return Network(None)
    exclusive = any(isinstance(p, dict) and p.get("type") == "host-device" for p in plugins)
    cel = f'device.driver == "{driver}"'
    if exclusive:
        cel += f' && device.attributes["{driver}"].sharing == "exclusive"'
    for nic in sorted(nics):
        cel += f' && device.attributes["{driver}"].ifName == {json.dumps(nic)}'
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{name}.{namespace}.{driver}"},
        "spec": {
            "selectors": [{"cel": {"expression": cel}}],
            "config": [{"opaque": {"driver": driver, "parameters": params}}],
        },
    }
    capabilities = {
        key for p in plugins if isinstance(p, dict) for key, on in (p.get("capabilities") or {}).items() if on
    }
    return Network(device_class, frozenset(capabilities))


def _without_capabilities(params: DeviceParameters) -> DeviceParameters:
    """``params`` without the plugins' ``capabilities``, for the tenant checks alone: declaring
    them (portMappings included) is the class's right, and the ips/mac a claim then sends are
    checked per claim."""
    copied = copy.deepcopy(params)
    for plugin in (copied["config"] or {}).get("plugins", []):
        plugin.pop("capabilities", None)
    return copied


def _strip_device_keys(
    config: dict[str, Any], plugins: list[Any], path: str, obj: str, problems: list[Problem]
) -> set[str]:
    """Take ``master``/``device``/... out of ``config`` (named as problems); the NICs they named."""
    nics = set()
    for index, plugin in enumerate(plugins):
        if not isinstance(plugin, dict):
            continue
        where = "spec.config" if plugins[0] is config else f"spec.config.plugins[{index}]"
        mode = "exclusive" if plugin.get("type") == "host-device" else "shared"
        for key in DEVICE_KEYS:
            if key not in plugin:
                continue
            value = plugin.pop(key)
            if key in ("master", "device") and isinstance(value, str):
                nics.add(value)
                how = (
                    f"the class now selects NICs named {value!r}; offer it as {mode} on the nodes "
                    f"(--nic-sharing={value}={mode})"
                )
            else:
                how = f"select the NIC in the class or template instead (offered as {mode})"
            problems.append(
                Problem(
                    path, obj, f"{where}.{key}",
                    f"{value!r} left out: dracni binds the NIC the scheduler allocates ({plugin.get('type')} on a "
                    f"{mode} NIC); {how}",
                )
            )  # fmt: skip
    return nics


def _workload(
    path: str,
    doc: dict[str, Any],
    networks: dict[tuple[str, str], Network],
    templates: dict[tuple[str, str], dict[str, Any]],
    driver: str,
    problems: list[Problem],
) -> dict[str, Any] | None:
    """``doc`` with resource claims for its annotation's networks; None when it has none."""
    doc = copy.deepcopy(doc)
    prefix, pod = pod_template(doc) or ("", {})
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if NETWORKS not in annotations:
        return None
    namespace = namespace_of(doc)
    obj = f"{doc['kind']} {namespace}/{(doc.get('metadata') or {}).get('name')}"
    where = f'{prefix}metadata.annotations["{NETWORKS}"]'
    if DEFAULT_NETWORK in annotations:
        problems.append(
            Problem(path, obj, f'{prefix}metadata.annotations["{DEFAULT_NETWORK}"]', "the pod's default network stays "
                    "the cluster's: dracni adds secondary attachments only")
        )  # fmt: skip
    try:
        selections = parse_networks(str(annotations.pop(NETWORKS)), namespace, where)
    except Unreadable as exc:
        problems.append(Problem(path, obj, exc.field, exc.reason))
        return None
    if not annotations:
        pod["metadata"].pop("annotations")
    spec = pod.setdefault("spec", {})
    used: set[str] = {str(c.get("name")) for c in spec.get("resourceClaims") or [] if isinstance(c, dict)}
    for sel in selections:
        at = f"{where}[{sel.index}]"
        for key, why in sel.dropped:
            problems.append(Problem(path, obj, f"{at}.{key}", f"not carried over: {why}"))
        network = networks.get((sel.namespace, sel.name))
        if network is None or network.device_class is None:
            missing = "is not in the inputs" if network is None else "was not carried over (see its own problem)"
            problems.append(Problem(path, obj, at, f"NetworkAttachmentDefinition {sel.namespace}/{sel.name} {missing}"))
            continue
        template = _template(sel, network, namespace, driver, path, obj, at, problems)
        templates.setdefault((namespace, template["metadata"]["name"]), template)
        claim = _unique(template["metadata"]["name"], used)
        spec.setdefault("resourceClaims", []).append({"name": claim, "resourceClaimTemplateName": claim_of(template)})
        for container in spec.get("containers") or []:
            container.setdefault("resources", {}).setdefault("claims", []).append({"name": claim})
    return doc


def claim_of(template: dict[str, Any]) -> str:
    return str(template["metadata"]["name"])


def _template(
    sel: Selection, network: Network, namespace: str, driver: str, path: str, obj: str, at: str, problems: list[Problem]
) -> dict[str, Any]:
    """The ResourceClaimTemplate for one selection: the class, and the tenant's choices."""
    assert network.device_class is not None
    class_name = network.device_class["metadata"]["name"]
    runtime: dict[str, Any] = {}
    for key, value in (("ips", list(sel.ips)), ("mac", sel.mac)):
        if not value:
            continue
        if key in network.capabilities:
            runtime[key] = value
        else:
            problems.append(
                Problem(path, obj, f"{at}.{key}", f"not carried over: network {class_name} declares no {key} "
                        f'capability: add "capabilities": {{"{key}": true}} to its plugin, as Multus needs too')
            )  # fmt: skip
    params: dict[str, Any] = {}
    if sel.interface:
        params["ifName"] = sel.interface
    if runtime:
        params["runtimeConfig"] = runtime
    if sel.ipam_claim:
        params["ipamClaim"] = sel.ipam_claim
    devices: dict[str, Any] = {"requests": [{"name": REQUEST, "exactly": {"deviceClassName": class_name}}]}
    if params:
        devices["config"] = [
            {"requests": [REQUEST], "opaque": {"driver": driver, "parameters": {**PARAMS_HEAD, **params}}}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": _template_name(sel, namespace, class_name, params), "namespace": namespace},
        "spec": {"spec": {"devices": devices}},
    }


def _template_name(sel: Selection, namespace: str, class_name: str, params: dict[str, Any]) -> str:
    """A readable, stable name: the NAD's, its ifName, and a digest when more is chosen."""
    parts = [sel.name]
    plain = sel.interface is not None and _slug(sel.interface) == sel.interface
    if plain:
        parts.append(str(sel.interface))
    if sel.namespace != namespace or set(params) - {"ifName"} or (sel.interface and not plain):
        digest = hashlib.sha256(json.dumps([class_name, params], sort_keys=True).encode()).hexdigest()[:8]
        parts.append(digest)
    return "-".join(parts)[:63].rstrip("-")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")


def _unique(name: str, used: set[str]) -> str:
    """``name``, or ``name-2``, ... when the pod already has a claim of that name."""
    candidate, n = name, 1
    while candidate in used:
        n += 1
        candidate = f"{name[:59]}-{n}"
    used.add(candidate)
    return candidate


def _check_templates(
    classes: list[dict[str, Any]], templates: list[dict[str, Any]], policy: TenantPolicy, driver: str,
    problems: list[Problem],
) -> None:  # fmt: skip
    """The tenant's choices against the classes, exactly as ``dracni validate`` checks them."""
    from ..params import ParameterError
    from ..policy.offline import check_found, class_networks, configs_in

    found = [item for doc in classes + templates for item in configs_in(doc, driver, "output")]
    networks = class_networks(found)
    for item in found:
        try:
            check_found(item, policy, networks)
        except ParameterError as exc:
            problems.append(Problem("output", item.where, exc.field, exc.reason))


def _dump(objects: list[dict[str, Any]]) -> str:
    import yaml

    def order(obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj.get("metadata") or {}
        return str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name"))

    return yaml.safe_dump_all(sorted(objects, key=order), sort_keys=True, default_flow_style=False, width=120)


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False), help="Directory to write.")
@policy_options
@driver_option
def convert_command(inputs: tuple[str, ...], output: str, policy: TenantPolicy, driver: str) -> None:
    """Convert Multus NetworkAttachmentDefinitions and annotated workloads (INPUTS: files or
    directories of YAML/JSON manifests) into DeviceClasses, ResourceClaimTemplates and
    workloads with resourceClaims, written to OUTPUT as deviceclasses.yaml,
    resourceclaimtemplates.yaml and workloads.yaml.  Talks to no cluster.  Exits 1 naming
    every item it could not carry over (file, object, field); the rest is still written."""
    result = convert(list(inputs), policy, driver)
    os.makedirs(output, exist_ok=True)
    from ..atomicfile import write_atomic

    for name, text in result.files.items():
        write_atomic(os.path.join(output, name), text.encode(), 0o644)
    for problem in result.problems:
        click.echo(f"error: {problem}", err=True)
    click.echo(", ".join(f"{name}: {n} object(s)" for name, n in result.counts.items()))
    if result.problems:
        click.echo(f"{len(result.problems)} item(s) not carried over", err=True)
        sys.exit(1)
