"""``dracni kubelet-plugin``: the DaemonSet's main process."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import click

from .. import defaults
from .options import (
    driver_option,
    metadata_options,
    policy_options,
    sharing_options,
    shown,
    state_dir_option,
)

if TYPE_CHECKING:
    from ..inventory.sharing import Sharing
    from ..policy.config import TenantPolicy


@click.command("kubelet-plugin")
@driver_option
@state_dir_option
@click.option("--node-name", envvar="NODE_NAME", required=True, help="This node's name (downward API).")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file; default: in-cluster config.")
@shown("--registry-dir", defaults.REGISTRY_DIR, "Kubelet's plugin registration directory.",
       envvar="DRACNI_REGISTRY_DIR")  # fmt: skip
@shown("--plugins-dir", defaults.PLUGINS_DIR, "Directory of the DRA socket (<dir>/<driver>/dra.sock).",
       envvar="DRACNI_PLUGINS_DIR")  # fmt: skip
@shown("--health-address", defaults.HEALTH_ADDRESS,
       "host:port serving /healthz, /readyz and /metrics; empty to disable.",
       envvar="DRACNI_HEALTH_ADDRESS")  # fmt: skip
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), envvar="DRACNI_LOG_FORMAT", default="text", show_default=True
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    envvar="DRACNI_LOG_LEVEL",
    default="info",
    show_default=True,
)
@policy_options
@sharing_options
@metadata_options
@click.option("--nic-include", multiple=True, metavar="GLOB", help="Publish only NICs matching (repeatable).")
@click.option("--nic-exclude", multiple=True, metavar="GLOB", help="Never publish NICs matching (repeatable).")
@click.option(
    "--publish-slices/--no-publish-slices",
    default=True,
    show_default=True,
    help="Publish the node's NICs as ResourceSlices.",
)
@click.option(
    "--nic-netns",
    envvar="DRACNI_NIC_NETNS",
    default=None,
    metavar="PATH",
    help="Network namespace holding the node's NICs (e.g. /proc/1/ns/net when the pod does not "
    "use hostNetwork); default: the service's own.",
)
@click.option(
    "--link-down-taint-effect",
    type=click.Choice(["NoSchedule", "NoExecute", "None"]),
    envvar="DRACNI_LINK_DOWN_TAINT_EFFECT",
    default="NoSchedule",
    show_default=True,
    help="Effect of the device taint on a NIC whose link is down or gone (KEP-5055); None: no taint.",
)
@click.option(
    "--instance-id",
    envvar="POD_UID",
    default=None,
    metavar="UID",
    help="This instance's ID, the pod's UID (downward API): sockets of its own, so that a new pod can "
    "start beside the old one in a rolling update (kubelet 1.33+).",
)
@click.option(
    "--fixed-socket-names",
    is_flag=True,
    envvar="DRACNI_FIXED_SOCKET_NAMES",
    help="Use <driver>-reg.sock and dra.sock whatever the instance ID: kubelets older than 1.33 "
    "know one instance per driver (then update with maxUnavailable: 1, maxSurge: 0).",
)
@click.option(
    "--network-status-annotation",
    is_flag=True,
    envvar="DRACNI_NETWORK_STATUS_ANNOTATION",
    help="Write each attachment into its pod's k8s.v1.cni.cncf.io/network-status annotation, beside the "
    "entries others wrote (Multus's readers; needs get/patch of pods and the pod-network-status policy).",
)
@click.option(
    "--pin-cpu/--no-pin-cpu",
    envvar="DRACNI_PIN_CPU",
    default=True,
    show_default=True,
    help="Run the service's threads on one CPU of those it may use, the one it starts on: its interpreter "
    "runs one thread at a time, and hand-overs between CPUs cost it CPU (docs/architecture.md).",
)
def kubelet_plugin(
    driver: str,
    state_dir: str,
    node_name: str,
    kubeconfig: str | None,
    registry_dir: str,
    plugins_dir: str,
    health_address: str,
    log_format: str,
    log_level: str,
    policy: TenantPolicy,
    sharing: Sharing,
    metadata: tuple[tuple[str, ...], str],
    nic_include: tuple[str, ...],
    nic_exclude: tuple[str, ...],
    publish_slices: bool,
    nic_netns: str | None,
    link_down_taint_effect: str,
    instance_id: str | None,
    fixed_socket_names: bool,
    network_status_annotation: bool,
    pin_cpu: bool,
) -> None:
    """Run the kubelet DRA plugin service (the DaemonSet's main process)."""
    from ..service.cpu import NOT_PINNED, pin_to_one_cpu
    from ..service.logs import setup_logging
    from ..service.main import Service, ServiceOptions, name_process

    name_process()
    placed = pin_to_one_cpu() if pin_cpu else NOT_PINNED
    setup_logging(log_format, log_level)
    logging.getLogger("dracni.service").info("%s", placed)
    opts = ServiceOptions(
        driver=driver,
        node=node_name,
        state_dir=state_dir,
        kubeconfig=kubeconfig,
        registry_dir=registry_dir,
        plugins_dir=plugins_dir,
        health_address=health_address,
        policy=policy,
        sharing=sharing,
        nic_include=list(nic_include),
        nic_exclude=list(nic_exclude),
        publish_slices=publish_slices,
        netns=nic_netns,
        link_taint_effect=link_down_taint_effect,
        instance=None if fixed_socket_names else (instance_id or None),
        device_metadata_versions=metadata[0],
        cdi_dir=metadata[1],
        network_status=network_status_annotation,
    )
    Service(opts).run_until_signalled()
