"""Operator commands of the dracni bundle (click).

Clusterless use reads ResourceClaim manifests from files: ``prepare``/``unprepare`` fill and
clear the state dir the CNI plugin reads, ``publish-status`` drains the status outbox into
``*.status.json`` files next to the manifests, ``inspect`` shows the state dir.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import click

from . import __version__, defaults, jsonio

if TYPE_CHECKING:
    from .claims.manifests import ManifestClaimSource
    from .state.store import StateDir

P = ParamSpec("P")
R = TypeVar("R")

state_dir_option = click.option(
    "--state-dir", envvar="DRACNI_STATE_DIR", default=defaults.STATE_DIR, show_default=True,
    type=click.Path(file_okay=False), help="On-node state directory shared with the CNI plugin.")
driver_option = click.option(
    "--driver", envvar="DRACNI_DRIVER", default=defaults.DRIVER, show_default=True,
    help="DRA driver name: opaque configs and status entries of this driver are ours.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dracni")
def main() -> None:
    """dracni: Kubernetes DRA network attachments through CNI."""


def _state(state_dir: str) -> StateDir:
    from .state.store import StateDir

    return StateDir(state_dir)


def _source(path: str) -> ManifestClaimSource:
    from .claims.manifests import ClaimSourceError, ManifestClaimSource

    source = ManifestClaimSource(path)
    try:
        source.list()
    except ClaimSourceError as exc:
        raise click.ClickException(str(exc)) from None
    return source


def _select(source: ManifestClaimSource, names: tuple[str, ...]) -> list[dict[str, Any]]:
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


@main.command()
@click.argument("claims_path", type=click.Path(exists=True))
@click.option("--claim", "names", multiple=True, metavar="NS/NAME", help="Only these claims (repeatable).")
@click.option("--node", envvar="NODE_NAME", default=None, help="This node's name.")
@click.option("--allow-type", "allowed", multiple=True, metavar="TYPE",
              help="Allowed delegate plugin types (repeatable; default: any).")
@state_dir_option
@driver_option
def prepare(claims_path: str, names: tuple[str, ...], node: str | None, allowed: tuple[str, ...],
            state_dir: str, driver: str) -> None:
    """Prepare the allocated claims found in CLAIMS_PATH (a manifest file or directory).

    The same guards as the kubelet plugin's: the claim's UID, and with --node, that its
    devices are allocated from this node's pool.
    """
    from .kubelet.helper import ClaimRef, KubeletPluginHelper

    source = _source(claims_path)
    refs = [ClaimRef(c["metadata"]["namespace"], c["metadata"]["uid"], c["metadata"]["name"])
            for c in _select(source, names)]
    helper = KubeletPluginHelper(state=_state(state_dir), claims=source, driver=driver, node=node,
                                 allowed_types=frozenset(allowed) or None)
    outcomes = helper.prepare(refs)
    failed = 0
    for uid, outcome in outcomes.items():
        if outcome.error:
            failed += 1
            click.echo(f"claim {uid}: error: {outcome.error}", err=True)
        else:
            devices = ", ".join(f"{d['request']}={d['pool']}/{d['device']}" for d in outcome.devices)
            click.echo(f"claim {uid}: prepared {devices}")
    if failed:
        sys.exit(1)


@main.command()
@click.argument("claims_path", type=click.Path(exists=True), required=False)
@click.option("--uid", "uids", multiple=True, help="Claim UID to unprepare (repeatable).")
@click.option("--claim", "names", multiple=True, metavar="NS/NAME", help="Only these claims of CLAIMS_PATH.")
@state_dir_option
def unprepare(claims_path: str | None, uids: tuple[str, ...], names: tuple[str, ...], state_dir: str) -> None:
    """Unprepare claims (all of CLAIMS_PATH, or the given UIDs); unknown claims succeed."""
    from .claims.prepare import unprepare_claims

    targets = list(uids)
    if claims_path:
        targets += [c["metadata"]["uid"] for c in _select(_source(claims_path), names)]
    if not targets:
        raise click.UsageError("give CLAIMS_PATH or --uid")
    failed = 0
    for uid, error in unprepare_claims(_state(state_dir), targets).items():
        if error:
            failed += 1
            click.echo(f"claim {uid}: error: {error}", err=True)
        else:
            click.echo(f"claim {uid}: unprepared")
    if failed:
        sys.exit(1)


@main.command("publish-status")
@click.argument("claims_path", type=click.Path(exists=True))
@state_dir_option
@driver_option
def publish_status(claims_path: str, state_dir: str, driver: str) -> None:
    """Drain the status outbox into <manifest>.<ns>.<name>.status.json files next to the manifests."""
    from .status.drain import drain_outbox
    from .status.sink import LocalStatusSink

    source = _source(claims_path)
    report = drain_outbox(_state(state_dir), LocalStatusSink(source.path_of), driver=driver)
    click.echo(f"published {report.published} claim status update(s)")
    for uid, error in sorted(report.failed.items()):
        click.echo(f"claim {uid}: not published, will retry: {error}", err=True)
    for uid, error in sorted(report.dropped.items()):
        click.echo(f"claim {uid}: dropped: {error}", err=True)
    if report.failed or report.dropped:
        sys.exit(1)


@main.command()
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the raw records as JSON.")
def inspect(state_dir: str, as_json: bool) -> None:
    """Show what the state dir holds: prepared claims, attachments, pending status."""
    from .state.records import is_pending

    state = _state(state_dir)
    claims, attachments, outbox = state.list_claims(), state.list_attachments(), state.list_outbox()
    if as_json:
        snapshot = {"stateDir": state.root, "claims": claims, "attachments": attachments, "outbox": outbox}
        click.echo(jsonio.dumps(snapshot, pretty=True).decode())
        return
    click.echo(f"state dir {state.root}")
    click.echo(f"prepared claims: {len(claims)}")
    for c in claims:
        pods = ", ".join(p.get("name") or p.get("uid") for p in c.get("pods", []))
        click.echo(f"  {c['namespace']}/{c['name']} uid={c['uid']} pods=[{pods}]")
        for spec in c["devices"]:
            plugins = "+".join(p.get("type", "?") for p in spec["config"]["plugins"])
            click.echo(f"    {spec['request']}: {spec['pool']}/{spec['device']} ifName={spec.get('ifName') or 'auto'} "
                       f"{plugins}")
    click.echo(f"attachments: {len(attachments)}")
    for a in attachments:
        pod = a.get("pod") or {}
        click.echo(f"  {a['network']} container={a['containerID']} pod={pod.get('namespace')}/{pod.get('name')} "
                   f"state={a['state']}")
        for d in a["devices"]:
            ips = ", ".join(ip.get("address", "") for ip in (d.get("result") or {}).get("ips", []))
            click.echo(f"    {d['ifName']}: claim {d['claim']['namespace']}/{d['claim']['name']} "
                       f"{d['pool']}/{d['device']} {ips}".rstrip())
    pending = [o for o in outbox if is_pending(o)]
    click.echo(f"status outbox: {len(pending)} pending of {len(outbox)}")
    for o in pending:
        click.echo(f"  {o['claim']['namespace']}/{o['claim']['name']} seq={o['seq']} published={o['publishedSeq']}")


@main.command()
@click.argument("path", type=click.Path(exists=True))
@click.option("--allow-type", "allowed", multiple=True, metavar="TYPE", help="Allowed delegate plugin types.")
@driver_option
def validate(path: str, allowed: tuple[str, ...], driver: str) -> None:
    """Validate claim parameters: a parameters file (YAML/JSON) or ResourceClaim manifests."""
    import yaml

    from .claims.params import ParameterError, validate_parameters

    with open(path, "rb") as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    found = 0
    problems = []
    for doc in docs:
        candidates = []
        if isinstance(doc, dict) and doc.get("kind") == "ResourceClaim":
            allocated = ((doc.get("status") or {}).get("allocation") or {}).get("devices") or {}
            configs = allocated.get("config") or (doc.get("spec") or {}).get("devices", {}).get("config") or []
            name = f"{doc.get('metadata', {}).get('namespace', 'default')}/{doc.get('metadata', {}).get('name')}"
            for i, cfg in enumerate(configs):
                opaque = cfg.get("opaque") or {}
                if opaque.get("driver") != driver:
                    continue
                candidates.append((f"{name} config[{i}]", opaque.get("parameters")))
        else:
            candidates.append((path, doc))
        for where, params in candidates:
            found += 1
            try:
                validate_parameters(params, allowed_types=frozenset(allowed) or None)
            except ParameterError as exc:
                problems.append(f"{where}: {exc}")
    for p in problems:
        click.echo(p, err=True)
    click.echo(f"{found - len(problems)} of {found} parameter set(s) valid")
    if problems or not found:
        sys.exit(1)


@main.command("kubelet-plugin")
@driver_option
@state_dir_option
@click.option("--node-name", envvar="NODE_NAME", required=True, help="This node's name (downward API).")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file; default: in-cluster config.")
@click.option("--registry-dir", envvar="DRACNI_REGISTRY_DIR", default=defaults.REGISTRY_DIR,
              show_default=True, help="Kubelet's plugin registration directory.")
@click.option("--plugins-dir", envvar="DRACNI_PLUGINS_DIR", default=defaults.PLUGINS_DIR, show_default=True,
              help="Directory of the DRA socket (<dir>/<driver>/dra.sock).")
@click.option("--health-address", envvar="DRACNI_HEALTH_ADDRESS", default=defaults.HEALTH_ADDRESS, show_default=True,
              help="host:port serving /healthz, /readyz and /metrics; empty to disable.")
@click.option("--log-format", type=click.Choice(["text", "json"]), envvar="DRACNI_LOG_FORMAT", default="text",
              show_default=True)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), envvar="DRACNI_LOG_LEVEL",
              default="info", show_default=True)
@click.option("--allow-type", "allowed", multiple=True, metavar="TYPE",
              help="Delegate plugin types claims may use (repeatable; default: any). Env: DRACNI_ALLOWED_TYPES, comma-separated.")
@click.option("--nic-include", multiple=True, metavar="GLOB", help="Publish only NICs matching (repeatable).")
@click.option("--nic-exclude", multiple=True, metavar="GLOB", help="Never publish NICs matching (repeatable).")
@click.option("--publish-slices/--no-publish-slices", default=True, show_default=True,
              help="Publish the node's NICs as ResourceSlices.")
@click.option("--nic-netns", envvar="DRACNI_NIC_NETNS", default=None, metavar="PATH",
              help="Network namespace holding the node's NICs (e.g. /proc/1/ns/net when the pod does not "
                   "use hostNetwork); default: the service's own.")
def kubelet_plugin(driver: str, state_dir: str, node_name: str, kubeconfig: str | None, registry_dir: str,
                   plugins_dir: str, health_address: str, log_format: str, log_level: str, allowed: tuple[str, ...],
                   nic_include: tuple[str, ...], nic_exclude: tuple[str, ...], publish_slices: bool,
                   nic_netns: str | None) -> None:
    """Run the kubelet DRA plugin service (the DaemonSet's main process)."""
    import os

    from .service.logs import setup_logging
    from .service.main import Service, ServiceOptions

    setup_logging(log_format, log_level)
    allowed_types = set(allowed) | {t for t in os.environ.get("DRACNI_ALLOWED_TYPES", "").split(",") if t}
    opts = ServiceOptions(driver=driver, node=node_name, state_dir=state_dir, kubeconfig=kubeconfig,
                          registry_dir=registry_dir, plugins_dir=plugins_dir, health_address=health_address,
                          allowed_types=frozenset(allowed_types) or None, nic_include=list(nic_include),
                          nic_exclude=list(nic_exclude), publish_slices=publish_slices, netns=nic_netns)
    Service(opts).run_until_signalled()


# -- node installation (the installer DaemonSet / init container) ----------------------------------

bin_dir_option = click.option(
    "--bin-dir", default=defaults.CNI_BIN_DIR, show_default=True, type=click.Path(file_okay=False),
    help="The CNI bin dir: gets the `dracni` link and `.dracni/<hash>/` bundle copies.")
conf_dir_option = click.option(
    "--conf-dir", default=defaults.CNI_CONF_DIR, show_default=True, type=click.Path(file_okay=False),
    help="The CNI network config dir of the runtime.")
conf_file_option = click.option(
    "--conf-file", default=defaults.CONF_FILE, show_default=True,
    help="dracni's generated conflist in --conf-dir; its name must sort before every other config.")


def _install_errors(func: Callable[P, R]) -> Callable[P, R]:
    """InstallError -> one line on stderr, exit 1 (no traceback)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from .install import InstallError

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


@main.command()
@bin_dir_option
@conf_dir_option
@click.option("--primary", default=None, metavar="NAME",
              help="File name of the primary network config in --conf-dir; default: the first config "
                   "file in the runtime's order that is not dracni's own.")
@conf_file_option
@click.option("--state-dir", envvar="DRACNI_STATE_DIR", default=None, type=click.Path(file_okay=False),
              help="`stateDir` of the plugin config (default: the plugin's own, /var/lib/dracni).")
@click.option("--log-file", default=None, help="`logFile` of the plugin config.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None,
              help="`logLevel` of the plugin config.")
@click.option("--bundle-dir", default=None, type=click.Path(file_okay=False, exists=True),
              help="The onedir bundle to install (holding `dracni` and `_internal/`); default: the "
                   "running bundle's directory (required when not frozen).")
@click.option("--watch", is_flag=True,
              help="After installing, keep the chained conflist in sync with the primary until SIGTERM.")
@click.option("--resync-seconds", default=60.0, show_default=True, type=click.FloatRange(min=0.1), hidden=True)
@_install_errors
def install(bin_dir: str, conf_dir: str, primary: str | None, conf_file: str, state_dir: str | None,
            log_file: str | None, log_level: str | None, bundle_dir: str | None, watch: bool,
            resync_seconds: float) -> None:
    """Install dracni on this node: the bundle into --bin-dir, a chained conflist into --conf-dir.

    Atomic (temp + rename, never a write in place), idempotent, and reversible with
    `dracni uninstall`.  Without --watch it runs once (an init container): exit 1 when there is
    no primary network config yet.
    """
    import os

    from . import install as inst

    if bundle_dir is None:
        bundle_dir = inst.running_bundle_dir()
        if bundle_dir is None:
            raise click.UsageError("--bundle-dir is required when dracni is not a frozen bundle")
    for value, option in ((state_dir, "--state-dir"), (log_file, "--log-file")):
        if value is not None and not os.path.isabs(value):
            raise click.BadParameter(f"{value}: must be an absolute path", param_hint=option)
    dracni_conf = {k: v for k, v in (("stateDir", state_dir), ("logFile", log_file), ("logLevel", log_level))
                   if v is not None}

    link = os.path.join(bin_dir, defaults.PLUGIN_NAME)
    before = os.readlink(link) if os.path.islink(link) else None
    executable = inst.install_bundle(bundle_dir, bin_dir)
    after = os.path.relpath(executable, bin_dir)
    click.echo(f"{link} -> {after}" + (" (unchanged)" if before == after else ""))

    if not watch:
        chained = os.path.join(conf_dir, conf_file)
        before_conf = _read_or_none(chained)
        found = inst.sync(conf_dir, dracni_conf, primary, conf_file)
        if not found:
            raise inst.NoPrimaryError(
                f"no CNI network config in {conf_dir} yet: is the primary CNI installed?" if primary is None
                else f"primary CNI network config {os.path.join(conf_dir, primary)} does not exist (yet)")
        state = "unchanged" if _read_or_none(chained) == before_conf else "written"
        click.echo(f"{chained} chains {os.path.basename(found)} ({state})")
        return

    import logging
    import threading

    from .service.signals import stop_on_signals

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    stop_on_signals(stop)
    click.echo(f"watching {conf_dir}")
    inst.watch(conf_dir, dracni_conf, primary, conf_file, stop=stop, resync_seconds=resync_seconds)


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


@main.command()
@bin_dir_option
@conf_dir_option
@conf_file_option
@_install_errors
def uninstall(bin_dir: str, conf_dir: str, conf_file: str) -> None:
    """Remove what `dracni install` created: the chained conflist, the link and the bundle copies."""
    from .install import uninstall as do_uninstall

    removed = do_uninstall(bin_dir, conf_dir, conf_file)
    for path in removed:
        click.echo(f"removed {path}")
    if not removed:
        click.echo("nothing to remove")
