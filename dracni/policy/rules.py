"""The named rules of the tenant policy, and the refusal that names them.

Every refusal says which field broke which rule and what to do instead, so a tenant reading
the pod's events (or ``dracni validate``) can fix the claim, and an administrator can tell a
policy refusal from a bug.  docs/security.md lists the same rules.
"""

from __future__ import annotations

from dracni.params import ParameterError

#: rule name -> what it protects (appended to every refusal).
RULES = {
    "claimConfigs": "under the profiles policy a claim chooses one of its DeviceClass's networks by name "
    "and sets only ifName, runtimeConfig.mac/ips, persistentIPs and ipamClaim; the administrator "
    "allows whole claim configs with claimConfigs: full",
    "classPrecedence": "the DeviceClass defines the network of this request (a config with source "
    "FromClass); a claim may choose one of its networks with parameters.network and set "
    "per-attachment fields, never replace it",
    "pluginTypes": "claim configs may run only the plugin types the administrator allows "
    "(pluginTypes in the policy, --allow-type)",
    "ipamTypes": "claim configs may run only the IPAM types the administrator allows "
    "(ipamTypes in the policy, --allow-ipam-type)",
    "noSelfDelegate": "dracni is never a delegate of itself: it would plan the same claim again, "
    "without end, and write files its config names",
    "ipamIsNotMain": "a main plugin is never an IPAM plugin: run as IPAM it calls itself, without end",
    "nodePaths": "a claim config may not name files, directories or sockets of the node; "
    "dracni gives IPAM its own data directory",
    "runtimeKeys": "a claim may set only the runtime values that stay inside the pod (mac, ips, "
    "bandwidth, ipRanges, deviceID of its own device); portMappings needs portmap in pluginTypes",
    "keyCase": "CNI plugins read JSON keys in any letter case (Go's encoding/json), so a claim config "
    "writes each key exactly and once, and the policy checks what the plugin reads",
    "deviceBinding": "a claim's interface is made from the device allocated to it; dracni fills in "
    "master, device and pciBusID from that device, leave them out",
    "exclusiveDevice": "host-device moves the whole NIC into the pod: only a device allocated to "
    "one claim (no shareID) can be moved",
    "sharedParent": "on a NIC other claims share (a shareID, or offered as shared or slots), a claim's own "
    "config may not change what the kernel keeps per parent: no macvlan passthru, no ipvlan of its own "
    "(one mode per parent), no tuning promisc or allmulti, and a vlan only with a vlanId of 1..4094 that the "
    "node or another attachment does not use on that parent (the kernel allows one VLAN device per ID)",
    "sysctls": "a claim config's tuning sysctls are limited to Kubernetes' safe set (the sysctls "
    "PodSecurity's baseline profile allows a pod); the administrator allows more, key by key "
    "(allowedSysctls in the policy)",
    "networkRanges": "addresses a claim picks must lie within the address ranges of the network's IPAM "
    "and, on a network with an address pool, be addresses the pool hands out",
    "addressOwnership": "an address a claim picks is never one the segment's infrastructure owns: the "
    "network and broadcast addresses, the network's gateway",
    "ifNameCharacters": "an interface name is printable ASCII without whitespace, quotes, backslash, '/', ':' "
    "or '%', so that ip, JSON tools and terminals show it as it is and the kernel creates it under that name",
    "macOwnership": "a claim's MAC is unicast and locally administered, so it never takes the identity of "
    "a NIC on the segment; the administrator allows vendor prefixes per network with allowedMACPrefixes in "
    "the DeviceClass config, and dracni's ADD refuses the parent's MAC and other attachments' MACs on it",
    "addressPools": "only the administrator defines address pools (addressPool in a DeviceClass config); "
    "a claim's addresses come from its class's pool, reserved for it across the cluster",
}


def refuse(field: str, what: str, rule: str) -> ParameterError:
    """The error for ``field`` breaking ``rule``: ``<field>: <what> (rule <rule>: <why>)``."""
    return ParameterError(field, f"{what} (rule {rule}: {RULES[rule]})")
