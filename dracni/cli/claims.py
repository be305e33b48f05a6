"""Clusterless commands: prepare and unprepare claims from manifests, publish their status to
files, show the state dir, validate parameters."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .. import defaults, jsonio
from .options import (
    driver_option,
    manifests_at,
    metadata_options,
    policy_options,
    select_claims,
    sharing_options,
    shown,
    state_at,
    state_dir_option,
)

if TYPE_CHECKING:
    from ..inventory.sharing import Sharing
    from ..policy.config import TenantPolicy


@click.command()
@click.argument("claims_path", type=click.Path(exists=True))
@click.option("--claim", "names", multiple=True, metavar="NS/NAME", help="Only these claims (repeatable).")
@click.option("--node", envvar="NODE_NAME", default=None, help="This node's name.")
@policy_options
@sharing_options
@click.option(
    "--nic-netns",
    envvar="DRACNI_NIC_NETNS",
    default=None,
    metavar="PATH",
    help="Network namespace holding the node's NICs, which allocated devices name; default: this one.",
)
@metadata_options
@shown("--plugins-dir", defaults.PLUGINS_DIR, "With --device-metadata-versions: the metadata files go under "
       "<dir>/<driver>/dra-device-metadata/.", envvar="DRACNI_PLUGINS_DIR")  # fmt: skip
@state_dir_option
@driver_option
def prepare(
    claims_path: str,
    names: tuple[str, ...],
    node: str | None,
    policy: TenantPolicy,
    sharing: Sharing,
    nic_netns: str | None,
    metadata: tuple[tuple[str, ...], str],
    plugins_dir: str,
    state_dir: str,
    driver: str,
) -> None:
    """Prepare the allocated claims found in CLAIMS_PATH (a manifest file or directory).

    The same guards as the kubelet plugin's: the claim's UID, with --node, that its devices
    are allocated from this node's pool, and the tenant policy.
    """
    from ..claims.device_metadata import metadata_writer
    from ..claims.driver import network_plugin
    from ..claims.prepare import Resolver
    from ..inventory.lookup import NodeDevices
    from ..kubelet.answers import uid_problem
    from ..kubelet.driver import ClaimRef
    from ..kubelet.sockets import plugin_data_dir

    source = manifests_at(claims_path)
    refs = [
        ClaimRef(c["metadata"]["namespace"], c["metadata"]["uid"], c["metadata"]["name"])
        for c in select_claims(source, names)
    ]
    lookup = NodeDevices(netns=nic_netns, sharing=sharing)
    writer = metadata_writer(driver, plugin_data_dir(plugins_dir, driver), metadata[1], metadata[0], lookup)
    resolver = Resolver(
        state=state_at(state_dir), driver=driver, node=node, policy=policy, devices=lookup, metadata=writer
    )
    helper, _ = network_plugin(resolver, claims=source, source_path=source.path_of)
    failed = len(source.skipped)
    for message in source.skipped:
        click.echo(f"error: {message}", err=True)
    bad = {ref.uid: problem for ref in refs if (problem := uid_problem(ref.uid))}
    for uid, problem in bad.items():
        failed += 1
        click.echo(f"claim {uid}: error: {problem}", err=True)
    outcomes = helper.prepare([ref for ref in refs if ref.uid not in bad], report=False)  # reported below
    for uid, outcome in outcomes.items():
        if outcome.error:
            failed += 1
            click.echo(f"claim {uid}: error: {outcome.error}", err=True)
        else:
            devices = ", ".join(f"{d['request']}={d['pool']}/{d['device']}" for d in outcome.devices)
            cdi = sorted({i for d in outcome.devices for i in d.get("cdiDeviceIDs") or []})
            click.echo(f"claim {uid}: prepared {devices}" + (f" (CDI devices: {', '.join(cdi)})" if cdi else ""))
    if failed:
        sys.exit(1)


@click.command()
@click.argument("claims_path", type=click.Path(exists=True), required=False)
@click.option("--uid", "uids", multiple=True, help="Claim UID to unprepare (repeatable).")
@click.option("--claim", "names", multiple=True, metavar="NS/NAME", help="Only these claims of CLAIMS_PATH.")
@state_dir_option
def unprepare(claims_path: str | None, uids: tuple[str, ...], names: tuple[str, ...], state_dir: str) -> None:
    """Unprepare claims (all of CLAIMS_PATH, or the given UIDs); unknown claims succeed.

    Through the kubelet plugin's helper, as kubelet's NodeUnprepareResources: the claims are
    locked and unprepared by the same driver code.
    """
    from ..claims.driver import network_plugin
    from ..claims.prepare import Resolver
    from ..defaults import DRIVER  # unprepare goes by UID alone: no driver's results to read
    from ..kubelet.driver import ClaimRef

    targets = [ClaimRef("", uid, "") for uid in uids]
    source = manifests_at(claims_path) if claims_path else None
    if source is not None:
        targets += [
            ClaimRef(c["metadata"]["namespace"], c["metadata"]["uid"], c["metadata"]["name"])
            for c in select_claims(source, names)
        ]
    if not targets:
        raise click.UsageError("give CLAIMS_PATH or --uid")
    helper, _ = network_plugin(Resolver(state=state_at(state_dir), driver=DRIVER), claims=source or _NoClaims())
    failed = 0
    for uid, error in helper.unprepare(targets, report=False).items():  # reported here
        if error:
            failed += 1
            click.echo(f"claim {uid}: error: {error}", err=True)
        else:
            click.echo(f"claim {uid}: unprepared")
    if failed:
        sys.exit(1)


@click.command("publish-status")
@click.argument("claims_path", type=click.Path(exists=True))
@state_dir_option
@driver_option
def publish_status(claims_path: str, state_dir: str, driver: str) -> None:
    """Drain the status outbox into <manifest>.<ns>.<name>.status.json files next to the manifests."""
    from ..status.drain import drain_outbox
    from ..status.sink import LocalStatusSink

    source = manifests_at(claims_path)
    sink = LocalStatusSink(source.path_of)
    report = drain_outbox(state_at(state_dir), sink, driver=driver)
    click.echo(f"published {report.published} claim status update(s)")
    unmatched = {uid: report.failed[uid] for uid in sink.unmatched if uid in report.failed}
    errors = {uid: error for uid, error in report.failed.items() if uid not in unmatched}
    for uid, reason in sorted(unmatched.items()):
        click.echo(f"claim {uid}: kept pending: {reason}", err=True)
    for uid, error in sorted(errors.items()):
        click.echo(f"claim {uid}: not published, will retry: {error}", err=True)
    for uid, error in sorted(report.dropped.items()):
        click.echo(f"claim {uid}: dropped: {error}", err=True)
    for uid, error in sorted(report.refused.items()):  # the claim's other entries were published
        click.echo(f"claim {uid}: entries refused: {error}", err=True)
    for uid, error in sorted(report.quarantined.items()):
        click.echo(f"claim {uid}: unreadable status outbox record: {error}", err=True)
    if unmatched:
        click.echo(f"{len(unmatched)} claim(s) kept pending: their manifests are not in {claims_path}", err=True)
    if errors or report.dropped or report.refused:
        sys.exit(1)


@click.command()
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the raw records as JSON.")
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    default=None,
    help="With --kubeconfig: also list this node's AddressReservations from the API server.",
)
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, help="Kubeconfig file, to read reservations.")
def inspect(state_dir: str, as_json: bool, node_name: str | None, kubeconfig: str | None) -> None:
    """Show what the state dir holds: prepared claims (with their pool addresses), attachments,
    pending status, and the records that cannot be read (in place, or moved aside into
    quarantine/); with --node-name and --kubeconfig, the node's address reservations too."""
    from ..state.records import is_pending
    from ..state.store import BadRecord

    state = state_at(state_dir)
    bad: list[BadRecord] = []
    claims, attachments, outbox = state.list_claims(bad), state.list_attachments(bad=bad), state.list_outbox(bad)
    quarantined = state.list_quarantine()
    reservations = _node_reservations(node_name, kubeconfig) if node_name and kubeconfig else None
    if as_json:
        snapshot = {
            "stateDir": state.root,
            "claims": claims,
            "attachments": attachments,
            "outbox": outbox,
            "unreadable": [{"path": b.path, "reason": str(b), "newer": b.newer} for b in bad],
            "quarantine": [{"path": path, "reason": reason} for path, reason in quarantined],
        }
        if reservations is not None:
            snapshot["reservations"] = reservations
        click.echo(jsonio.dumps(snapshot, pretty=True).decode())
        return
    click.echo(f"state dir {state.root}")
    click.echo(f"prepared claims: {len(claims)}")
    for c in claims:
        pods = ", ".join(p.get("name") or p.get("uid") for p in c.get("pods", []))
        click.echo(f"  {c['namespace']}/{c['name']} uid={c['uid']} pods=[{pods}]")
        for spec in c["devices"]:
            plugins = "+".join(p.get("type", "?") for p in spec["config"]["plugins"])
            click.echo(
                f"    {spec['request']}: {spec['pool']}/{spec['device']} ifName={spec.get('ifName') or 'auto'} "
                f"{plugins}"
            )
            for line in _pool_lines(spec, {p.get("uid"): p.get("name") for p in c.get("pods", [])}):
                click.echo(f"      {line}")
    click.echo(f"attachments: {len(attachments)}")
    for a in attachments:
        pod = a.get("pod") or {}
        click.echo(
            f"  {a['network']} container={a['containerID']} pod={pod.get('namespace')}/{pod.get('name')} "
            f"state={a['state']}"
        )
        for d in a["devices"]:
            ips = ", ".join(ip.get("address", "") for ip in (d.get("result") or {}).get("ips", []))
            click.echo(
                f"    {d['ifName']}: claim {d['claim']['namespace']}/{d['claim']['name']} "
                f"{d['pool']}/{d['device']} {ips}".rstrip()
            )
    pending = [o for o in outbox if is_pending(o)]
    click.echo(f"status outbox: {len(pending)} pending of {len(outbox)}")
    for o in pending:
        click.echo(f"  {o['claim']['namespace']}/{o['claim']['name']} seq={o['seq']} published={o['publishedSeq']}")
    click.echo(f"unreadable records: {len(bad)}")
    for b in bad:  # each message names its file
        click.echo(f"  {b}")
    click.echo(f"quarantined records: {len(quarantined)}")
    for path, reason in quarantined:
        click.echo(f"  {reason}" if path in reason else f"  {path}: {reason}")
    if reservations is not None:
        click.echo(f"address reservations of node {node_name}: {len(reservations)}")
        click.echo(f"  {'NAME':<34} {'POOL':<12} {'ADDRESS':<24} CLAIM")
        for obj in reservations:
            rspec: dict[str, Any] = obj.get("spec") or {}
            holder: dict[str, Any] = rspec.get("claim") or {}
            keep = " (kept)" if rspec.get("keep") else ""
            click.echo(
                f"  {obj['metadata']['name']:<34} {rspec.get('pool', '?'):<12} {rspec.get('address', '?'):<24} "
                f"{holder.get('namespace')}/{holder.get('name')}{keep}"
            )


def _pool_lines(spec: Any, pod_names: dict[Any, Any]) -> list[str]:
    """A prepared device's pool addresses: the claim's (pinned), or each pod's."""
    pool = spec.get("addressPool")
    if not pool:
        return []
    name = pool.get("name", "?")
    if spec.get("requestedIPs"):
        return [f"pool {name}: {', '.join(spec['requestedIPs'])} (the claim's)"]
    return [
        f"pool {name}: {', '.join(ips)} (pod {pod_names.get(uid) or uid})"
        for uid, ips in sorted((spec.get("poolIPs") or {}).items())
    ]


def _node_reservations(node: str, kubeconfig: str) -> list[dict[str, Any]]:
    from ..kube.api import ApiError, KubeApi, load_api_client
    from ..pools.reservations import NODE_LABEL

    try:
        api = KubeApi(load_api_client(kubeconfig, node))
        items = api.list_node_reservations(f"{NODE_LABEL}={node}")
    except (ApiError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot list the address reservations of node {node}: {exc}") from None
    return sorted(items, key=lambda o: o["metadata"]["name"])


@click.command()
@click.argument("path", type=click.Path(exists=True))
@policy_options
@driver_option
def validate(path: str, policy: TenantPolicy, driver: str) -> None:
    """Validate claim parameters under the tenant policy, as prepare would.

    PATH is a parameters file (YAML/JSON) or a file of manifests: ResourceClaims,
    ResourceClaimTemplates and DeviceClasses (whose networks the claims' choices are checked
    against).  What needs the allocated device (which NIC master names) is checked on the node.
    """
    from ..claims.manifests import ClaimSourceError, TooDeep, read_documents
    from ..params import ParameterError
    from ..policy.offline import check_found, class_networks, configs_in

    try:
        docs = [d for d in read_documents(path) if d is not None]
    except ClaimSourceError as exc:
        raise click.ClickException(f"not YAML or JSON: {exc}") from None
    skipped = [d.message for d in docs if isinstance(d, TooDeep)]
    found = [item for doc in docs if not isinstance(doc, TooDeep) for item in configs_in(doc, driver, path)]
    networks = class_networks(found)
    problems = []
    for item in found:
        try:
            check_found(item, policy, networks)
        except ParameterError as exc:
            problems.append(f"{item.where}: {exc}")
    for p in skipped + problems:
        click.echo(p, err=True)
    click.echo(f"{len(found) - len(problems)} of {len(found)} parameter set(s) valid")
    if skipped:
        click.echo(f"{len(skipped)} document(s) skipped", err=True)
    if problems or skipped or not found:
        sys.exit(1)


class _NoClaims:
    """The claim source of ``dracni unprepare --uid`` alone: unprepare reads no claim."""

    def get(self, namespace: str, name: str) -> None:
        return None
