"""What the commands share: the common options and the claim-manifest helpers."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import defaults

if TYPE_CHECKING:
    from ..claims.manifests import ManifestClaimSource
    from ..inventory.sharing import Sharing
    from ..policy.config import TenantPolicy
    from ..state.store import StateDir

F = TypeVar("F", bound=Callable[..., Any])


def shown(
    flag: str, default: str, help: str, *, envvar: str | None = None, directory: bool = False
) -> Callable[[F], F]:
    """An option whose default ``--help`` shows; ``directory``: its value names a directory."""
    kind = click.Path(file_okay=False) if directory else None
    return click.option(flag, envvar=envvar, default=default, show_default=True, type=kind, help=help)


state_dir_option = shown(
    "--state-dir", defaults.STATE_DIR, "On-node state directory shared with the CNI plugin.",
    envvar="DRACNI_STATE_DIR", directory=True,
)  # fmt: skip
driver_option = shown(
    "--driver", defaults.DRIVER, "DRA driver name: opaque configs and status entries of this driver are ours.",
    envvar="DRACNI_DRIVER",
)  # fmt: skip


#: The tenant policy's settings (docs/security.md), in ``--help`` order.
_POLICY_OPTIONS = [
    click.option(
        "--policy-file",
        envvar="DRACNI_POLICY_FILE",
        default=None,
        metavar="PATH",
        help="Tenant policy: a YAML/JSON file, or a directory of one file per key (a mounted "
        "ConfigMap) with claimConfigs, pluginTypes, ipamTypes.  Default: the safe defaults.",
    ),
    click.option(
        "--claim-configs",
        type=click.Choice(["profiles", "full"]),
        envvar="DRACNI_CLAIM_CONFIGS",
        default=None,
        help="profiles (default): claims choose a DeviceClass network by name; full: claims may "
        "also bring their own CNI config, under the allowlists.",
    ),
    click.option(
        "--allow-type",
        "allow_types",
        multiple=True,
        metavar="TYPE",
        help="Also allow this plugin type in claim configs (repeatable). Env: DRACNI_ALLOWED_TYPES (commas).",
    ),
    click.option(
        "--allow-ipam-type",
        "allow_ipam_types",
        multiple=True,
        metavar="TYPE",
        help="Also allow this IPAM type in claim configs (repeatable). Env: DRACNI_ALLOWED_IPAM_TYPES.",
    ),
]

#: How NICs are offered (inventory/sharing.py), in ``--help`` order.
_SHARING_OPTIONS = [
    click.option(
        "--nic-sharing",
        "sharing_rules",
        multiple=True,
        metavar="GLOB=MODE",
        help="Offer matching NICs as exclusive (one claim at a time; host-device), shared "
        "(many claims, consumable capacity) or slots (N devices per NIC); first match wins; "
        "others: shared, or slots where the API server lacks consumable capacity. Env: "
        "DRACNI_NIC_SHARING (commas).",
    ),
    shown("--nic-slots", "16", "Devices per NIC in slots mode.", envvar="DRACNI_NIC_SLOTS"),
    shown("--max-attachments", "64", "Attachments a shared NIC takes.", envvar="DRACNI_MAX_ATTACHMENTS"),
]


#: Device metadata (KEP-5304, claims/device_metadata.py), in ``--help`` order.
_METADATA_OPTIONS = [
    click.option(
        "--device-metadata-versions",
        envvar="DRACNI_DEVICE_METADATA_VERSIONS",
        default="",
        metavar="LIST",
        help="Write device metadata (KEP-5304) in these versions of metadata.resource.k8s.io, "
        "e.g. v1alpha1 or v1beta1,v1alpha1 (commas; the first is the one consumers try first); "
        "empty (default): none.",
    ),
    shown("--cdi-dir", "/var/run/cdi", "Where the device metadata's CDI specs go.", envvar="DRACNI_CDI_DIR"),
]


def metadata_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Device metadata's settings, handed to the command as ONE parameter, ``metadata:
    tuple[versions, cdi_dir]``, checked before the command runs."""

    @functools.wraps(command)
    def with_metadata(*args: Any, device_metadata_versions: str, cdi_dir: str, **kwargs: Any) -> Any:
        from ..claims.device_metadata import parse_versions

        try:
            versions = parse_versions(device_metadata_versions)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--device-metadata-versions") from None
        return command(*args, metadata=(versions, cdi_dir), **kwargs)

    return _under(_METADATA_OPTIONS, with_metadata)


def policy_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The tenant policy's settings, handed to the command as ONE parameter, ``policy:
    TenantPolicy`` (``tenant_policy``), before the command runs: a bad policy stops it first.
    Above ``sharing_options``, the policy is read before the sharing."""

    @functools.wraps(command)
    def with_policy(
        *args: Any,
        policy_file: str | None,
        claim_configs: str | None,
        allow_types: tuple[str, ...],
        allow_ipam_types: tuple[str, ...],
        **kwargs: Any,
    ) -> Any:
        return command(*args, policy=tenant_policy(policy_file, claim_configs, allow_types, allow_ipam_types), **kwargs)

    return _under(_POLICY_OPTIONS, with_policy)


def sharing_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """How NICs are offered, handed to the command as ONE parameter, ``sharing: Sharing``
    (``nic_sharing``), before the command runs: a bad rule stops it first."""

    @functools.wraps(command)
    def with_sharing(
        *args: Any, sharing_rules: tuple[str, ...], nic_slots: str, max_attachments: str, **kwargs: Any
    ) -> Any:
        return command(*args, sharing=nic_sharing(sharing_rules, nic_slots, max_attachments), **kwargs)

    return _under(_SHARING_OPTIONS, with_sharing)


def _under(options: list[Callable[[F], F]], command: Callable[..., Any]) -> Callable[..., Any]:
    """``command`` with ``options``, listed in ``--help`` in their order."""
    for option in reversed(options):
        command = option(command)
    return command


def nic_sharing(rules: tuple[str, ...], slots: str, max_attachments: str) -> Sharing:
    """The sharing the options describe; a bad rule stops the command with its reason."""
    import os

    from ..inventory.sharing import parse_sharing

    env = [r.strip() for r in os.environ.get("DRACNI_NIC_SHARING", "").split(",") if r.strip()]
    try:
        return parse_sharing([*rules, *env], slots=int(slots), max_attachments=int(max_attachments))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def tenant_policy(
    policy_file: str | None, claim_configs: str | None, allow_types: tuple[str, ...], allow_ipam_types: tuple[str, ...]
) -> TenantPolicy:
    """The policy the options describe; a bad one stops the command with its reason."""
    import os

    from ..policy.config import PolicyError, load_policy, split_types

    try:
        return load_policy(
            policy_file,
            claim_configs=claim_configs,
            allow_types=set(allow_types) | split_types(os.environ.get("DRACNI_ALLOWED_TYPES", "")),
            allow_ipam_types=set(allow_ipam_types) | split_types(os.environ.get("DRACNI_ALLOWED_IPAM_TYPES", "")),
        )
    except PolicyError as exc:
        raise click.ClickException(str(exc)) from None


def state_at(state_dir: str) -> StateDir:
    from ..state.store import StateDir

    return StateDir(state_dir)


def manifests_at(path: str) -> ManifestClaimSource:
    from ..claims.manifests import ClaimSourceError, ManifestClaimSource

    source = ManifestClaimSource(path)
    try:
        source.list()
    except ClaimSourceError as exc:
        raise click.ClickException(str(exc)) from None
    return source


def select_claims(source: ManifestClaimSource, names: tuple[str, ...]) -> list[dict[str, Any]]:
    claims = source.list()
    if not names:
        return claims
    chosen = []
    for ref in names:
        namespace, _, name = ref.rpartition("/")
        claim = source.get(namespace or "default", name)
        if claim is None:
            raise click.ClickException(f"--claim {ref}: no such ResourceClaim in {source.path}")
        chosen.append(claim)
    return chosen
