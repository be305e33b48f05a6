"""What a claim's own configuration may contain (tenant input), and what no config may contain.

Applied after the parameters' shape is checked (``dracni.params``) and before anything runs:
by the service's prepare, ``dracni prepare`` and ``dracni validate`` alike.  Device-dependent
rules (which NIC ``master`` may name) are ``policy.binding``'s; they need the allocation.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from collections.abc import Iterator
from typing import Any

from dracni.params import DeviceParameters, ParameterError

from .config import FULL, MAIN_PLUGIN_TYPES, SELF_TYPE, TenantPolicy
from .macs import check_claim_macs, check_mac, check_mac_form, check_no_mac_prefixes
from .netranges import in_host_local_ranges, network_gateways, network_subnets
from .rules import refuse

#: Keys that name a path or socket of the node, wherever they appear in a plugin config.
NODE_PATH_KEYS = frozenset(
    {
        "logFile", "logfile", "stateDir", "dataDir", "dataDirectory", "daemonSocketPath", "socketPath",
        "kubeconfig", "binDir", "confDir", "cniDir", "kernelpath", "pidfile", "resolvConf",
    }
)  # fmt: skip
#: Keys the runtime or dracni sets; in a claim's plugin config they would bypass the checks.
RUNTIME_SET_KEYS = frozenset({"runtimeConfig", "prevResult", "delegate", "delegates", "linkInContainer"})
#: Keys that mean something to dracni or to a plugin; Go's encoding/json (every reference
#: plugin) reads a key in any letter case (``MASTER`` sets ``master``), so a claim must write
#: these exactly as here, or the policy would check one key and the plugin read another.
MEANINGFUL_KEYS = frozenset(
    {
        "type", "name", "cniVersion", "ipam", "capabilities", "master", "device", "pciBusID", "hwaddr",
        "mode", "mtu", "mac", "ips", "args", "ranges", "subnet", "addresses", "routes", "dns", "portMappings",
    }
) | NODE_PATH_KEYS | RUNTIME_SET_KEYS  # fmt: skip
_FOLDED_MEANINGFUL = {key.casefold(): key for key in MEANINGFUL_KEYS}
#: runtimeConfig keys a full claim config may set (portMappings only with portmap allowed).
CLAIM_RUNTIME_KEYS = frozenset({"mac", "ips", "bandwidth", "ipRanges", "deviceID"})
#: runtimeConfig keys a profile claim (a network chosen by name) may set.
PROFILE_RUNTIME_KEYS = frozenset({"mac", "ips"})
PORT_MAPPINGS = "portMappings"
MANAGED_DATA_DIR_TYPES = frozenset({"host-local"})


def plugin_field(where: str, index: int, single: bool) -> str:
    """The field path of plugin ``index`` as the user wrote it (a single plugin has no list)."""
    return f"{where}.config" if single else f"{where}.config.plugins[{index}]"


# -- every source ------------------------------------------------------------------------------


def check_any_source(params: DeviceParameters, where: str) -> None:
    """Rules no config breaks, the administrator's included: no dracni, no main plugin as IPAM."""
    config = params["config"]
    assert config is not None
    for index, plugin in enumerate(config["plugins"]):
        field = plugin_field(where, index, params["single"])
        if plugin["type"] == SELF_TYPE:
            raise refuse(f"{field}.type", f'"{SELF_TYPE}" cannot be a delegate', "noSelfDelegate")
        ipam_type = _ipam_type(plugin)
        if ipam_type == SELF_TYPE:
            raise refuse(f"{field}.ipam.type", f'"{SELF_TYPE}" cannot be a delegate', "noSelfDelegate")
        if ipam_type in MAIN_PLUGIN_TYPES:
            raise refuse(f"{field}.ipam.type", f'"{ipam_type}" is a main plugin', "ipamIsNotMain")


# -- full claim configs --------------------------------------------------------------------------


def check_claim_config(params: DeviceParameters, policy: TenantPolicy, where: str) -> None:
    """A whole CNI configuration written by a tenant: allowed only as the policy says."""
    config = params["config"]
    assert config is not None
    if policy.claim_configs != FULL:
        raise refuse(f"{where}.config", "a claim config may not define its own network", "claimConfigs")
    _check_no_pool(params, where)
    check_no_mac_prefixes(params, where)
    check_any_source(params, where)
    for index, plugin in enumerate(config["plugins"]):
        field = plugin_field(where, index, params["single"])
        if plugin["type"] not in policy.plugin_types:
            allowed = ", ".join(sorted(policy.plugin_types))
            raise refuse(f"{field}.type", f"{_show(plugin['type'])} is not allowed (allowed: {allowed})", "pluginTypes")
        ipam_type = _ipam_type(plugin)
        if ipam_type is not None and ipam_type not in policy.ipam_types:
            allowed = ", ".join(sorted(policy.ipam_types))
            raise refuse(f"{field}.ipam.type", f"{_show(ipam_type)} is not allowed (allowed: {allowed})", "ipamTypes")
        keys = list(_keys(plugin, field))
        for path, key, _ in keys:
            meant = _FOLDED_MEANINGFUL.get(key.casefold(), key)
            if meant in NODE_PATH_KEYS:
                raise refuse(f"{path}.{key}", "refused in a claim config", "nodePaths")
            if meant in RUNTIME_SET_KEYS:
                raise refuse(f"{path}.{key}", "refused in a claim config: the runtime or dracni sets it", "runtimeKeys")
            if meant != key:
                raise refuse(f"{path}.{key}", f'write "{meant}" exactly', "keyCase")
        for path, key, siblings in keys:
            twins = [k for k in siblings if k != key and k.casefold() == key.casefold()]
            if twins:
                raise refuse(f"{path}.{key}", f'"{twins[0]}" is the same key in another letter case', "keyCase")
        if plugin["type"] == "tuning":
            _check_sysctls(plugin.get("sysctl"), policy, f"{field}.sysctl")
        _check_static_addresses(plugin, params, f"{field}.ipam.addresses")
        capabilities = plugin.get("capabilities", {})
        if not isinstance(capabilities, dict):
            raise ParameterError(f"{field}.capabilities", "must be an object of capability name -> true/false")
        if capabilities.get(PORT_MAPPINGS) and not policy.port_mappings:
            raise refuse(f"{field}.capabilities.{PORT_MAPPINGS}", "reaches the node's ports", "runtimeKeys")
    allowed_runtime = CLAIM_RUNTIME_KEYS | ({PORT_MAPPINGS} if policy.port_mappings else set())
    _check_runtime_keys(params, allowed_runtime, where)
    if params["capabilities"].get(PORT_MAPPINGS) and not policy.port_mappings:
        raise refuse(f"{where}.capabilities.{PORT_MAPPINGS}", "reaches the node's ports", "runtimeKeys")
    check_claim_macs(params, where)


def manage_ipam_data(config: dict[str, Any], data_dir: str) -> None:
    """Point the IPAM plugins that keep files at dracni's own directory (claim configs only)."""
    for plugin in config["plugins"]:
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") in MANAGED_DATA_DIR_TYPES:
            ipam["dataDir"] = data_dir


# -- profiles: a network chosen by name ---------------------------------------------------------------


def check_profile_knobs(params: DeviceParameters, where: str) -> None:
    """A claim that chooses a network may set only per-attachment fields."""
    _check_runtime_keys(params, PROFILE_RUNTIME_KEYS, where)
    _check_no_pool(params, where)
    check_no_mac_prefixes(params, where)
    check_mac_form(params, where)
    if params["capabilities"]:
        raise refuse(f"{where}.capabilities", "a claim choosing a network cannot enable capabilities", "claimConfigs")


def apply_profile(network: DeviceParameters, knobs: DeviceParameters, where: str) -> DeviceParameters:
    """The class's ``network`` with the claim's per-attachment fields laid over it."""
    check_profile_knobs(knobs, where)
    config = network["config"]
    assert config is not None
    for key, value in knobs["runtimeConfig"].items():
        if not _declares(network, key):
            raise refuse(
                f"{where}.runtimeConfig.{key}",
                f'network "{config["name"]}" takes no {key} from claims (none of its plugins declares the '
                f"{key} capability)",
                "claimConfigs",
            )
        if key == "ips":
            _check_in_ranges(value, network, f"{where}.runtimeConfig.ips")
        if key == "mac":
            knobs["runtimeConfig"]["mac"] = check_mac(value, network, f"{where}.runtimeConfig.mac")
    merged: DeviceParameters = {
        **copy.deepcopy(network),
        "runtimeConfig": {**copy.deepcopy(network["runtimeConfig"]), **copy.deepcopy(knobs["runtimeConfig"])},
    }
    if knobs["ifName"] is not None:
        merged["ifName"] = knobs["ifName"]
    if knobs["persistentIPs"]:
        merged["persistentIPs"] = True
    if knobs["ipamClaim"] is not None:
        merged["ipamClaim"] = knobs["ipamClaim"]
    return merged


def _check_not_infrastructure(address: Any, network: DeviceParameters, field: str) -> None:
    """A chosen address is never the segment's network or broadcast address nor its gateway."""
    ip, net = address.ip, address.network
    what = None
    if net.num_addresses > 2 and ip == net.network_address:
        what = "the network address"
    elif net.version == 4 and net.num_addresses > 2 and ip == net.broadcast_address:
        what = "the broadcast address"
    elif ip in network_gateways(network):
        what = "the network's gateway"
    if what:
        raise refuse(field, f"{ip} is {what} of {net}", "addressOwnership")


def _check_in_ranges(ips: Any, network: DeviceParameters, field: str) -> None:
    name = (network["config"] or {}).get("name")
    if not isinstance(ips, list) or not ips:
        raise ParameterError(field, 'must be a list of addresses in CIDR form, e.g. ["10.10.1.5/24"]')
    subnets = network_subnets(network)
    if not subnets:
        raise refuse(field, f'network "{name}" defines no address ranges a claim could choose from', "networkRanges")
    for index, text in enumerate(ips):
        try:
            address = ipaddress.ip_interface(text) if isinstance(text, str) else None
        except ValueError:
            address = None
        if address is None:
            raise ParameterError(f"{field}[{index}]", f"{_show(text)} is not an address in CIDR form")
        if not any(address.ip in subnet and address.network == subnet for subnet in subnets):
            ranges = ", ".join(str(s) for s in subnets)
            raise refuse(f"{field}[{index}]", f'{_show(text)} is outside network "{name}" ({ranges})', "networkRanges")
        _check_not_infrastructure(address, network, f"{field}[{index}]")
        outside = in_host_local_ranges(address.ip, network)
        if outside:
            raise refuse(
                f"{field}[{index}]",
                f'{address.ip} is outside the addresses network "{name}" hands out ({outside})',
                "networkRanges",
            )
        _check_in_pool(address.ip, network, f"{field}[{index}]")


def _check_static_addresses(plugin: dict[str, Any], params: DeviceParameters, field: str) -> None:
    """A tenant's static IPAM hands out only what its subnet owns: never the subnet's network or
    (IPv4) broadcast address, nor a gateway its config names (static IPAM assigns whatever it is
    told, and the gateway's ARP entry would then point to the pod).  A text the plugin cannot
    parse is the plugin's to refuse."""
    ipam = plugin.get("ipam")
    if not isinstance(ipam, dict) or ipam.get("type") != "static" or not isinstance(ipam.get("addresses"), list):
        return
    for index, entry in enumerate(ipam["addresses"]):
        text = entry.get("address") if isinstance(entry, dict) else None
        try:
            address = ipaddress.ip_interface(text) if isinstance(text, str) else None
        except ValueError:
            address = None
        if address is not None:
            _check_not_infrastructure(address, params, f"{field}[{index}].address")


# -- helpers -----------------------------------------------------------------------------------------------


def _check_sysctls(sysctls: Any, policy: TenantPolicy, field: str) -> None:
    if sysctls is None:
        return
    if not isinstance(sysctls, dict):
        raise ParameterError(field, "must be an object of sysctl name -> value")
    for key in sysctls:
        name = key.replace("/", ".") if isinstance(key, str) else key
        if name not in policy.sysctls:
            raise refuse(
                f"{field}[{_show(key)}]",
                f"{_show(key)} is not a sysctl claims may set (Kubernetes' safe set; the administrator adds "
                "more with allowedSysctls)",
                "sysctls",
            )


def _check_no_pool(params: DeviceParameters, where: str) -> None:
    if params.get("addressPool") is not None:
        raise refuse(f"{where}.addressPool", "a claim cannot define an address pool", "addressPools")


def _check_in_pool(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, network: DeviceParameters, field: str) -> None:
    """On a pool network, a chosen address must be one the pool hands out."""
    raw = network.get("addressPool")
    if raw is None:
        return
    from ..pools.model import parse_pool

    pool = parse_pool(raw, "addressPool")
    if pool.subnet_of(ip) is None:
        raise refuse(
            field,
            f"{ip} is not an address pool {pool.name} hands out ({pool.describe()}; never its network, "
            "broadcast, gateway or excluded addresses)",
            "networkRanges",
        )


def _check_runtime_keys(params: DeviceParameters, allowed: frozenset[str] | set[str], where: str) -> None:
    for key in params["runtimeConfig"]:
        if key not in allowed:
            listed = ", ".join(sorted(allowed))
            raise refuse(
                f"{where}.runtimeConfig.{key}", f"not a value claims may set (allowed: {listed})", "runtimeKeys"
            )


def _declares(network: DeviceParameters, key: str) -> bool:
    if network["capabilities"].get(key):
        return True
    plugins = (network["config"] or {}).get("plugins", [])
    return any(isinstance(p.get("capabilities"), dict) and p["capabilities"].get(key) for p in plugins)


def _ipam_type(plugin: dict[str, Any]) -> str | None:
    ipam = plugin.get("ipam")
    value = ipam.get("type") if isinstance(ipam, dict) else None
    return value if isinstance(value, str) else None


def _keys(value: Any, path: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Every (parent path, key, parent) of the nested objects in ``value``; iterative, any depth."""
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                yield where, key, node
                stack.append((child, f"{where}.{key}"))
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(node))


def _show(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)[:80]
