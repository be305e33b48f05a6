"""``dracni install`` and ``dracni uninstall``: put dracni on a node and take it off again."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import click

from .. import defaults
from .options import driver_option, sharing_options, shown

if TYPE_CHECKING:
    from ..inventory.sharing import Sharing

P = ParamSpec("P")
R = TypeVar("R")

# -- node installation (the installer DaemonSet / init container) ----------------------------------

bin_dir_option = shown(
    "--bin-dir", defaults.CNI_BIN_DIR, "The CNI bin dir: gets the `dracni` link and `.dracni/<hash>/` bundle copies.",
    directory=True,
)  # fmt: skip
conf_dir_option = shown(
    "--conf-dir", defaults.CNI_CONF_DIR, "The CNI network config dir of the runtime.", directory=True
)  # fmt: skip
conf_file_option = shown(
    "--conf-file", defaults.CONF_FILE,
    "dracni's generated conflist in --conf-dir; its name must sort before every other config.",
)  # fmt: skip


def _install_errors(func: Callable[P, R]) -> Callable[P, R]:
    """InstallError -> one line on stderr, exit 1 (no traceback)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from ..install import InstallError

        try:
            return func(*args, **kwargs)
        except InstallError as exc:
            click.echo(f"dracni: {exc}", err=True)
            sys.exit(1)
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            click.echo(f"dracni: {exc.strerror or exc}{where}", err=True)
            sys.exit(1)

    return wrapper


@click.command()
@bin_dir_option
@conf_dir_option
@click.option(
    "--primary",
    default=None,
    metavar="NAME",
    help="File name of the primary network config in --conf-dir; default: the first config "
    "file in the runtime's order that is not dracni's own.",
)
@conf_file_option
@click.option(
    "--state-dir",
    envvar="DRACNI_STATE_DIR",
    default=None,
    type=click.Path(file_okay=False),
    help="`stateDir` of the plugin config (default: the plugin's own, /var/lib/dracni).",
)
@click.option("--log-file", default=None, help="`logFile` of the plugin config.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default=None,
    help="`logLevel` of the plugin config.",
)
@click.option(
    "--bundle-dir",
    default=None,
    type=click.Path(file_okay=False, exists=True),
    help="The onedir bundle to install (holding `dracni` and `_internal/`); default: the "
    "running bundle's directory (required when not frozen).",
)
@click.option(
    "--host-root",
    envvar="DRACNI_HOST_ROOT",
    default="/",
    show_default=True,
    type=click.Path(file_okay=False, exists=True),
    help="Where the node's root filesystem is mounted (in the DaemonSet: /host).  The installed "
    "copy is run there (chroot) before the link or the conflist may name it.",
)
@click.option("--node-name", envvar="NODE_NAME", default=None, help="The node a failed check is reported on (Event).")
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig for that Event; default: in-cluster config when in a cluster, else no Event.",
)
@click.option(
    "--watch", is_flag=True, help="After installing, keep the chained conflist in sync with the primary until SIGTERM."
)
@click.option("--resync-seconds", default=60.0, show_default=True, type=click.FloatRange(min=0.1), hidden=True)
@_install_errors
def install(
    bin_dir: str,
    conf_dir: str,
    primary: str | None,
    conf_file: str,
    state_dir: str | None,
    log_file: str | None,
    log_level: str | None,
    bundle_dir: str | None,
    host_root: str,
    node_name: str | None,
    kubeconfig: str | None,
    watch: bool,
    resync_seconds: float,
) -> None:
    """Install dracni on this node: the bundle into --bin-dir, a chained conflist into --conf-dir.

    Atomic (temp + rename, never a write in place), idempotent, and reversible with
    `dracni uninstall`.  Without --watch it runs once (an init container): exit 1 when there is
    no primary network config yet.  Before the link or the conflist names the new copy, it is run
    on the node (VERSION and a pass-through ADD, through --host-root): if it cannot run there,
    the node's CNI configuration and the previous version stay, and it exits 1 naming the cause.
    """
    import os

    from .. import install as inst

    if bundle_dir is None:
        bundle_dir = inst.running_bundle_dir()
        if bundle_dir is None:
            raise click.UsageError("--bundle-dir is required when dracni is not a frozen bundle")
    for value, option in ((state_dir, "--state-dir"), (log_file, "--log-file")):
        if value is not None and not os.path.isabs(value):
            raise click.BadParameter(f"{value}: must be an absolute path", param_hint=option)
    dracni_conf = {
        k: v for k, v in (("stateDir", state_dir), ("logFile", log_file), ("logLevel", log_level)) if v is not None
    }

    link = os.path.join(bin_dir, defaults.PLUGIN_NAME)
    before = os.readlink(link) if os.path.islink(link) else None
    from ..install.hostcheck import HostCheck, HostCheckError

    check = HostCheck(host_root)
    try:
        executable = inst.install_bundle(bundle_dir, bin_dir, verify=lambda exe: check.run(exe, bin_dir))
    except HostCheckError as exc:
        note = f"dracni was not installed: {exc}; the node's CNI configuration is unchanged"
        _report_on_node(node_name, kubeconfig, note)
        raise
    after = os.path.relpath(executable, bin_dir)
    click.echo(f"{link} -> {after}" + (" (unchanged)" if before == after else ""))

    if not watch:
        chained = os.path.join(conf_dir, conf_file)
        before_conf = _read_or_none(chained)
        found = inst.sync(conf_dir, dracni_conf, primary, conf_file)
        if not found:
            raise inst.NoPrimaryError(
                f"no CNI network config in {conf_dir} yet: is the primary CNI installed?"
                if primary is None
                else f"primary CNI network config {os.path.join(conf_dir, primary)} does not exist (yet)"
            )
        state = "unchanged" if _read_or_none(chained) == before_conf else "written"
        click.echo(f"{chained} chains {os.path.basename(found)} ({state})")
        return

    import logging
    import threading

    from ..service.signals import stop_on_signals

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    stop_on_signals(stop)
    click.echo(f"watching {conf_dir}")
    inst.watch(conf_dir, dracni_conf, primary, conf_file, stop=stop, resync_seconds=resync_seconds)


def _report_on_node(node_name: str | None, kubeconfig: str | None, message: str) -> None:
    """A Warning Event on the Node, when there is a cluster to tell (best effort: the init
    container's exit status and its last log line say the same)."""
    if not node_name or not (kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST")):
        return
    try:
        from ..kube.api import KubeApi, load_api_client
        from ..kube.events import EventRecorder

        api_client = load_api_client(kubeconfig, node_name)
        api_client.configuration.retries = 1
        api = KubeApi(api_client)
        recorder = EventRecorder(api, controller=defaults.DRIVER, instance=f"{defaults.DRIVER}-{node_name}")
        recorder.retry_seconds = 1.0
        regarding = {"apiVersion": "v1", "kind": "Node", "name": node_name}
        recorder.warn(regarding, "CNIPluginCannotRun", "Install", message)
        recorder.drain()
    except Exception as exc:  # the message still reaches the container's status
        click.echo(f"dracni: could not record an Event on node {node_name}: {exc}", err=True)


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


@click.command()
@bin_dir_option
@conf_dir_option
@conf_file_option
@_install_errors
def uninstall(bin_dir: str, conf_dir: str, conf_file: str) -> None:
    """Remove what `dracni install` created: the chained conflist, the link and the bundle copies."""
    from ..install import uninstall as do_uninstall

    removed = do_uninstall(bin_dir, conf_dir, conf_file)
    for path in removed:
        click.echo(f"removed {path}")
    if not removed:
        click.echo("nothing to remove")


# -- what the node offers ---------------------------------------------------------------------------


@click.command()
@driver_option
@click.option("--node-name", envvar="NODE_NAME", default=None, help="The node's name; default: this host's name.")
@sharing_options
@click.option("--nic-include", multiple=True, metavar="GLOB", help="Publish only NICs matching (repeatable).")
@click.option("--nic-exclude", multiple=True, metavar="GLOB", help="Never publish NICs matching (repeatable).")
@click.option("--nic-netns", envvar="DRACNI_NIC_NETNS", default=None, metavar="PATH", help="Netns holding the NICs.")
@click.option(
    "--without-consumable-capacity",
    is_flag=True,
    help="As on an API server whose DRAConsumableCapacity gate is off: shared NICs as slots.",
)
def inventory(
    driver: str,
    node_name: str | None,
    sharing: Sharing,
    nic_include: tuple[str, ...],
    nic_exclude: tuple[str, ...],
    nic_netns: str | None,
    without_consumable_capacity: bool,
) -> None:
    """Print, as YAML, the ResourceSlices this node would publish (the service's code and options)."""
    import socket

    import yaml

    from ..inventory.nics import discover_nics, eligible
    from ..inventory.slices import build_slices

    if without_consumable_capacity:
        sharing = sharing.without_consumable_capacity()
    try:
        nics = [
            n
            for n in discover_nics(netns=nic_netns)
            if eligible(n, list(nic_include) or None, list(nic_exclude) or None)
        ]
        slices = build_slices(
            driver=driver,
            node_name=node_name or socket.gethostname(),
            node_uid=None,
            nics=nics,
            generation=1,
            sharing=sharing,
        )
    except (OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(yaml.safe_dump_all(slices, sort_keys=False), nl=False)
