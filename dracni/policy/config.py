"""The administrator's tenant policy: which claim configurations the node accepts.

Trust model (docs/security.md): the node's conflist, the service's flags, this policy and the
DeviceClass configs (allocation configs with ``source: FromClass``) are the administrator's;
a claim's own configs (``source: FromClaim``) are tenant input.  The policy says how much of a
CNI configuration a tenant may write:

- ``claimConfigs: profiles`` (the default): a claim picks one of the networks its DeviceClass
  defines, by name, and sets only per-attachment fields (ifName, mac, addresses within the
  network's ranges, persistentIPs, ipamClaim);
- ``claimConfigs: full``: a claim may also bring a whole CNI configuration where no class
  config covers its request, limited to ``pluginTypes`` and ``ipamTypes`` and to keys that
  stay inside the pod and the allocated device.

The same settings come from a file (YAML or JSON mapping), from a directory holding one file
per key (a ConfigMap mounted as a volume: the admission policy reads the same ConfigMap), and
from flags; flags win over the file, and ``--allow-type`` adds to the file's list.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

PROFILES = "profiles"
FULL = "full"
MODES = (PROFILES, FULL)

#: Plugins that act only inside the pod, on the allocated device (host-device only on a device
#: allocated to one claim).  Plugins that change the node's own namespace or firewall (bridge,
#: ptp, portmap, firewall, ...) are not here: the administrator can add them.
DEFAULT_PLUGIN_TYPES = frozenset({"macvlan", "ipvlan", "vlan", "host-device", "tuning", "sbr", "bandwidth"})
DEFAULT_IPAM_TYPES = frozenset({"host-local", "static", "dhcp"})

#: dracni itself is never a delegate, from any source: it would run the same claim again.
SELF_TYPE = "dracni"
#: Main and meta plugins: never an IPAM plugin (a main plugin as IPAM calls itself, unbounded).
MAIN_PLUGIN_TYPES = frozenset(
    {
        "bandwidth", "bridge", "dummy", "firewall", "host-device", "ipvlan", "loopback", "macvlan",
        "portmap", "ptp", "sbr", "tap", "tuning", "vlan", "vrf", "multus", "multus-shim", SELF_TYPE,
    }
)  # fmt: skip

#: The sysctls a pod may set under PodSecurity's baseline profile (k8s.io/pod-security-admission
#: policy/check_sysctls.go, sysctlsAllowedV1Dot29 and sysctlsAllowedV1Dot32's additions): the
#: sysctls a claim config's tuning may set unless the administrator allows more.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
    }
)  # fmt: skip

KEY_CLAIM_CONFIGS = "claimConfigs"
KEY_PLUGIN_TYPES = "pluginTypes"
KEY_IPAM_TYPES = "ipamTypes"
KEY_ALLOWED_SYSCTLS = "allowedSysctls"
_KEYS = (KEY_CLAIM_CONFIGS, KEY_PLUGIN_TYPES, KEY_IPAM_TYPES, KEY_ALLOWED_SYSCTLS)


class PolicyError(ValueError):
    """An administrator's policy that cannot be used; the message names the setting."""


@dataclass(frozen=True)
class TenantPolicy:
    """What claim configurations (tenant input) may contain.  The defaults are the safe ones."""

    claim_configs: str = PROFILES
    plugin_types: frozenset[str] = field(default=DEFAULT_PLUGIN_TYPES)
    ipam_types: frozenset[str] = field(default=DEFAULT_IPAM_TYPES)
    #: Sysctls a claim config's tuning may set: Kubernetes' safe set plus the administrator's.
    sysctls: frozenset[str] = field(default=SAFE_SYSCTLS)

    def __post_init__(self) -> None:
        if self.claim_configs not in MODES:
            raise PolicyError(f"{KEY_CLAIM_CONFIGS}: {self.claim_configs!r} is not one of {', '.join(MODES)}")
        if SELF_TYPE in self.plugin_types or SELF_TYPE in self.ipam_types:
            raise PolicyError(f"{KEY_PLUGIN_TYPES}/{KEY_IPAM_TYPES}: {SELF_TYPE} can never be a delegate of itself")
        mains = sorted(self.ipam_types & (MAIN_PLUGIN_TYPES | self.plugin_types))
        if mains:
            raise PolicyError(
                f"{KEY_IPAM_TYPES}: {', '.join(mains)} are main plugins, never IPAM plugins "
                "(a main plugin run as IPAM calls itself)"
            )

    @property
    def port_mappings(self) -> bool:
        """runtimeConfig.portMappings reaches the node's ports: only with portmap allowed."""
        return "portmap" in self.plugin_types

    def describe(self) -> str:
        return (
            f"claimConfigs={self.claim_configs} pluginTypes={','.join(sorted(self.plugin_types))} "
            f"ipamTypes={','.join(sorted(self.ipam_types))}"
            + (
                f" allowedSysctls={','.join(sorted(self.sysctls - SAFE_SYSCTLS))}"
                if self.sysctls - SAFE_SYSCTLS
                else ""
            )
        )


def load_policy(
    path: str | None = None,
    *,
    claim_configs: str | None = None,
    allow_types: Iterable[str] = (),
    allow_ipam_types: Iterable[str] = (),
) -> TenantPolicy:
    """The policy from ``path`` (file or ConfigMap directory; none: the defaults) and flags."""
    settings = _read(path) if path else {}
    mode = claim_configs or _string(settings, KEY_CLAIM_CONFIGS) or PROFILES
    plugins = _types(settings, KEY_PLUGIN_TYPES, DEFAULT_PLUGIN_TYPES) | _clean(allow_types)
    ipams = _types(settings, KEY_IPAM_TYPES, DEFAULT_IPAM_TYPES) | _clean(allow_ipam_types)
    sysctls = SAFE_SYSCTLS | _types(settings, KEY_ALLOWED_SYSCTLS, frozenset())
    where = f" (policy {path})" if path else ""
    try:
        return TenantPolicy(claim_configs=mode, plugin_types=plugins, ipam_types=ipams, sysctls=sysctls)
    except PolicyError as exc:
        raise PolicyError(f"{exc}{where}") from None


def split_types(text: str) -> frozenset[str]:
    """A list of types as a ConfigMap value or an environment variable holds it: commas."""
    return _clean(text.replace("\n", ",").split(","))


def _clean(names: Iterable[str]) -> frozenset[str]:
    return frozenset(n.strip() for n in names if n.strip())


def _read(path: str) -> dict[str, Any]:
    if os.path.isdir(path):  # a ConfigMap volume: one file per key
        settings: dict[str, Any] = {}
        for key in _KEYS:
            try:
                with open(os.path.join(path, key), encoding="utf-8") as f:
                    settings[key] = f.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise PolicyError(f"policy {path}: cannot read {key}: {exc.strerror}") from None
        return settings
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise PolicyError(f"policy {path}: cannot read it: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"policy {path}: not YAML or JSON: {exc}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise PolicyError(f"policy {path}: must be a mapping of {', '.join(_KEYS)}")
    data = data.get("data", data) if data.get("kind") == "ConfigMap" else data
    unknown = sorted(set(data) - set(_KEYS) - {"apiVersion", "kind", "metadata"})
    if unknown:
        raise PolicyError(f"policy {path}: unknown setting {unknown[0]} (known: {', '.join(_KEYS)})")
    return dict(data)


def _string(settings: dict[str, Any], key: str) -> str | None:
    value = settings.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise PolicyError(f"{key}: must be one of {', '.join(MODES)}")
    return value.strip() or None


def _types(settings: dict[str, Any], key: str, default: frozenset[str]) -> frozenset[str]:
    value = settings.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        return split_types(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return _clean(value)
    raise PolicyError(f"{key}: must be a list of plugin types or a comma-separated string")
