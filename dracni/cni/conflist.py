"""The chain layer: one device's delegate conflist, run the way libcni runs a network list.

libcni's counterparts (``libcni/api.go``): ``buildOneConfig``/``injectRuntimeConfig`` give each
plugin of the list its own config (``name`` and ``cniVersion`` of the list, ``runtimeConfig``
only for the capabilities it declares); ``AddNetworkList`` runs ADD in order, handing each
plugin the previous one's result as ``prevResult``; ``DelNetworkList`` runs DEL in reverse;
``CheckNetworkList`` runs CHECK in order; ``GCNetworkList`` sends GC with the attachments still
valid.  Finding and executing one plugin is ``dracni.cni.delegate``'s job.
"""

from __future__ import annotations

from . import errors as E
from .delegate import NO_CONTAINER
from .errors import CNIError
from .log import log
from .versions import LATEST, at_least, from_current, to_current

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.records import JSON, Delegate
    from .delegate import DelegateRunner, RuntimeConf


def delegate_config(
    plugin: JSON,
    *,
    network: str,
    version: str,
    runtime_config: JSON,
    extra_capabilities: dict[str, bool],
    prev_result: JSON | None,
) -> JSON:
    """The config object one delegate of a conflist receives (libcni's rules).

    ``name`` and ``cniVersion`` come from the list; ``runtimeConfig`` holds only the
    capabilities the plugin declares (or the attachment enables); ``prevResult`` is the
    result of the plugin before it in the chain, in this delegate's version.
    """
    conf = dict(plugin)
    conf["name"] = network
    conf["cniVersion"] = version
    declared = plugin.get("capabilities")
    enabled = {**(declared if isinstance(declared, dict) else {}), **extra_capabilities}
    rc = {k: v for k, v in runtime_config.items() if enabled.get(k)}
    conf.pop("runtimeConfig", None)
    if rc:
        conf["runtimeConfig"] = rc
    conf.pop("prevResult", None)
    if prev_result is not None:
        conf["prevResult"] = from_current(prev_result, version)
    return conf


def build_chain(
    runner: DelegateRunner,
    conflist: JSON,
    *,
    runtime_config: JSON,
    capabilities: dict[str, bool],
    requested_ips: list[str],
    where: str,
    negotiate: bool = True,
) -> list[Delegate]:
    """The delegates of a conflist, each with the exact config it will be sent (no prevResult).

    Each plugin gets the highest version both sides speak, up to the list's ``cniVersion``.
    Pinned addresses go to the IPAM through the ``ips`` capability and ``args.cni.ips``.
    """
    cap = conflist.get("cniVersion") or LATEST
    runtime_config = dict(runtime_config)
    if requested_ips:
        runtime_config.setdefault("ips", requested_ips)
    delegates: list[Delegate] = []
    for i, plugin in enumerate(conflist["plugins"]):
        field = f"{where}: config.plugins[{i}].type"
        binary = runner.find(plugin.get("type"), field)
        version = runner.negotiate(binary, cap, field) if negotiate else cap
        conf = delegate_config(
            plugin,
            network=conflist["name"],
            version=version,
            runtime_config=runtime_config,
            extra_capabilities=capabilities,
            prev_result=None,
        )
        if requested_ips:
            args = dict(conf.get("args") or {})
            args["cni"] = {**(args.get("cni") or {}), "ips": requested_ips}
            conf["args"] = args
        delegates.append(
            {"type": plugin["type"], "cniVersion": version, "config": conf, "added": False, "result": None}
        )
    return delegates


def _with_prev(delegate: Delegate, result: JSON | None) -> JSON:
    conf = dict(delegate["config"])
    if result is not None:
        conf["prevResult"] = from_current(result, delegate["cniVersion"])
    return conf


def add_chain(runner: DelegateRunner, delegates: list[Delegate], rt: RuntimeConf) -> JSON | None:
    """ADD every delegate in order; returns the last result (internal 1.x form).

    Marks each delegate ``added`` once its ADD ran, so a rollback knows what DEL is owed.
    """
    prev: JSON | None = None
    for delegate in delegates:
        result = runner.delegate(delegate["type"], "ADD", _with_prev(delegate, prev), rt)
        delegate["added"] = True
        if result is None:
            raise CNIError(E.DELEGATE_FAILED, f"delegate {delegate['type']} ADD printed no result")
        prev = to_current(result, result.get("cniVersion") or delegate["cniVersion"])
        delegate["result"] = prev
    return prev


def del_chain(runner: DelegateRunner, delegates: list[Delegate], result: JSON | None, rt: RuntimeConf) -> list[str]:
    """DEL every delegate in reverse order; return the failures that matter.

    DEL runs for every delegate, also those whose ADD failed or never ran (DEL is
    idempotent and an ADD may fail half-way).  But only a delegate whose ADD succeeded
    and was not yet released can hold something: its DEL errors are returned so the
    runtime retries; others are logged (Debian's macvlan, for one, fails DEL when its
    master link is gone, which would otherwise wedge the pod forever).  When a delegate's
    DEL fails because its parent link is gone (``release_without_parent``), its IPAM is
    released directly; what still could not be released is returned.
    """
    problems = []
    for delegate in reversed(delegates):
        conf = _with_prev(delegate, result)
        try:
            runner.delegate(delegate["type"], "DEL", conf, rt)
            delegate["added"] = False
        except CNIError as exc:
            if not delegate.get("added"):
                log.warning(f"DEL of {rt.ifname} delegate {delegate['type']} (never added): {exc.msg}")
                continue
            problem = release_without_parent(runner, delegate, conf, rt, exc)
            if problem is None:
                delegate["added"] = False
            else:
                problems.append(f"{rt.ifname}: {problem}")
    return problems


#: What a delegate's DEL says when the link its interface hangs off is gone (netlink's
#: ENODEV as vishvananda/netlink words it, and the kernel's own).
_PARENT_GONE = ("link not found", "no such device")


def release_without_parent(
    runner: DelegateRunner, delegate: Delegate, conf: JSON, rt: RuntimeConf, exc: CNIError
) -> str | None:
    """After a failed DEL: release the delegate's IPAM itself when its parent link is gone.

    A macvlan or ipvlan whose master was removed is gone with it (the kernel deletes the
    sub-interfaces), but the plugin's DEL looks the master up first and fails, so its IPAM
    DEL never runs and the address stays allocated.  Here the IPAM plugin gets the DEL the
    delegate would have sent (libcni's ``pkg/ipam`` ``ExecDel``: the delegate's own config,
    same environment).  Returns None when released, else what could not be released.
    """
    failure = f"{exc.msg} {exc.details}".lower()
    ipam = delegate["config"].get("ipam")
    if not any(words in failure for words in _PARENT_GONE):
        return exc.msg
    if not isinstance(ipam, dict) or not isinstance(ipam.get("type"), str):
        return f"{exc.msg} (its parent link is gone; it has no IPAM to release)"
    try:
        runner.delegate(ipam["type"], "DEL", conf, rt, "ipam.type")
    except CNIError as ipam_exc:
        return f"{exc.msg}; its parent link is gone and the address could not be released: {ipam_exc.msg}"
    log.warning(
        f"DEL of {rt.ifname} delegate {delegate['type']} failed because its parent link is gone ({exc.msg}): "
        f"released its IPAM ({ipam['type']}) directly"
    )
    return None


def check_chain(runner: DelegateRunner, delegates: list[Delegate], result: JSON | None, rt: RuntimeConf) -> None:
    """CHECK every delegate that speaks 0.4.0 or later, in order; the first failure raises."""
    for delegate in delegates:
        if at_least(delegate["cniVersion"], "0.4.0"):
            runner.delegate(delegate["type"], "CHECK", _with_prev(delegate, result), rt)


def gc_network(runner: DelegateRunner, plugin: JSON, network: str, valid: list[JSON]) -> bool:
    """GC one delegate network with the attachments still valid; False when it cannot GC.

    Only plugins that speak 1.1.0 know GC (the spec forbids sending it to older ones).
    """
    binary = runner.find(plugin.get("type"))
    if "1.1.0" not in runner.supported_versions(binary):
        return False
    conf = delegate_config(
        plugin, network=network, version="1.1.0", runtime_config={}, extra_capabilities={}, prev_result=None
    )
    conf["cni.dev/valid-attachments"] = valid
    runner.exec(binary, "GC", conf, NO_CONTAINER)
    return True


def merge_results(results: list[JSON]) -> JSON:
    """One result listing every interface, address and route of several delegate chains."""
    merged: JSON = {"cniVersion": LATEST, "interfaces": [], "ips": [], "routes": [], "dns": {}}
    for result in results:
        offset = len(merged["interfaces"])
        merged["interfaces"] += result.get("interfaces") or []
        for ip in result.get("ips") or []:
            ip = dict(ip)
            if isinstance(ip.get("interface"), int):
                ip["interface"] += offset
            merged["ips"].append(ip)
        merged["routes"] += result.get("routes") or []
        if result.get("dns") and not merged["dns"]:
            merged["dns"] = result["dns"]
    return {k: v for k, v in merged.items() if v or k in ("cniVersion", "dns")}
