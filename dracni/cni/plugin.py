"""The meta-plugin's operations: ADD, DEL, CHECK, GC and STATUS.

ADD finds the pod's prepared claims in the state dir, runs each device's delegate conflist
into the pod's netns, and records an Attachment (everything DEL/CHECK/GC need) plus the
status facts for the publisher.  Without prepared claims it is a pass-through.
"""

from __future__ import annotations

import os
import time

from . import errors as E
from .delegate import DelegateRunner, delegate_config
from .errors import CNIError
from .log import log
from .request import Request
from .versions import LATEST, at_least, from_current, to_current

#: Interface names dracni picks for devices without an explicit ifName: net1, net2, ...
AUTO_IFNAME_PREFIX = "net"


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class MetaPlugin:
    """One invocation's view of the plugin: the request, the state dir and a delegate runner."""

    def __init__(self, req: Request, state, runner: DelegateRunner) -> None:
        self.req = req
        self.state = state
        self.runner = runner

    # -- planning -------------------------------------------------------------------------
    def plan(self, claims: list[dict]) -> list[dict]:
        """Order the pod's devices and give each its interface name.

        Claims are ordered by namespace/name/uid and devices by their position in the claim,
        so a retried ADD gives every device the same ``netN`` as the first attempt.
        """
        devices = []
        for claim in sorted(claims, key=lambda c: (c.get("namespace", ""), c.get("name", ""), c["uid"])):
            ref = {"uid": claim["uid"], "namespace": claim.get("namespace", ""), "name": claim.get("name", "")}
            for dev in claim.get("devices", []):
                devices.append({"claim": ref, "driver": claim.get("driver"), "spec": dev})
        taken = {self.req.ifname: "the runtime's primary interface"}
        for d in devices:
            name = d["spec"].get("ifName")
            if name:
                where = f"claim {d['claim']['namespace']}/{d['claim']['name']} request {d['spec']['request']}"
                if name in taken:
                    raise CNIError(E.INVALID_CONFIG, f"ifName: {where} asks for {name!r}, already used by {taken[name]}")
                taken[name] = where
        n = 0
        for d in devices:
            if not d["spec"].get("ifName"):
                n += 1
                while f"{AUTO_IFNAME_PREFIX}{n}" in taken:
                    n += 1
                d["ifName"] = f"{AUTO_IFNAME_PREFIX}{n}"
            else:
                d["ifName"] = d["spec"]["ifName"]
        return devices

    def _delegates_for(self, device: dict, negotiate: bool = True) -> list[dict]:
        """The delegate entries (type, version, config without prevResult) of one device."""
        spec = device["spec"]
        conflist = spec["config"]
        cap = conflist.get("cniVersion") or LATEST
        where = f"claim {device['claim']['namespace']}/{device['claim']['name']} request {spec['request']}"
        runtime_config = dict(spec.get("runtimeConfig") or {})
        requested = spec.get("requestedIPs") or []
        if requested:  # persistent addresses: the "ips" capability and the args.cni.ips convention
            runtime_config.setdefault("ips", requested)
        delegates = []
        for i, plugin in enumerate(conflist["plugins"]):
            field = f"{where}: config.plugins[{i}].type"
            binary = self.runner.find(plugin.get("type"), field)
            version = self.runner.negotiate(binary, cap, field) if negotiate else cap
            conf = delegate_config(plugin, network=conflist["name"], version=version,
                                   runtime_config=runtime_config,
                                   extra_capabilities=spec.get("capabilities") or {}, prev_result=None)
            if requested:
                args = dict(conf.get("args") or {})
                args["cni"] = {**(args.get("cni") or {}), "ips": requested}
                conf["args"] = args
            delegates.append({"type": plugin["type"], "cniVersion": version, "config": conf,
                              "added": False, "result": None})
        return delegates

    def _record_base(self, state: str) -> dict:
        req = self.req
        return {
            "kind": "Attachment", "network": req.network, "containerID": req.container_id,
            "ifName": req.ifname, "netns": req.netns, "cniArgs": req.args, "cniVersion": req.cni_version,
            "pod": {"uid": req.pod_uid, "namespace": req.pod_namespace, "name": req.pod_name},
            "state": state, "error": None, "updatedAt": now_rfc3339(), "devices": [],
        }

    # -- ADD ------------------------------------------------------------------------------
    def add(self) -> dict:
        req = self.req
        claims = self.state.pod_claims(req.pod_uid, req.pod_namespace, req.pod_name)
        if not claims:
            log.debug("no prepared claims for this pod: pass-through")
            return self._passthrough_result()
        planned = self.plan(claims)
        record = self._record_base("adding")
        for d in planned:
            spec = d["spec"]
            record["devices"].append({
                "claim": d["claim"], "request": spec["request"], "pool": spec["pool"], "device": spec["device"],
                "shareID": spec.get("shareID"), "ifName": d["ifName"], "driver": d["driver"],
                "delegates": self._delegates_for(d), "result": None, "error": None,
                "persistentIPs": bool(spec.get("persistentIPs") or spec.get("ipamClaim")),
                "ipamClaim": spec.get("ipamClaim"), "requestedIPs": spec.get("requestedIPs") or [],
            })
        # Write-ahead: DEL must find this record even if we die half-way through.
        self.state.put_attachment(record)
        failure: CNIError | None = None
        for dev in record["devices"]:
            try:
                self._add_device(dev)
            except CNIError as exc:
                where = f"claim {dev['claim']['namespace']}/{dev['claim']['name']} request {dev['request']}"
                failure = CNIError(exc.code, f"{where} ({dev['ifName']}): {exc.msg}", exc.details)
                dev["error"] = {"code": failure.code, "msg": failure.msg, "details": failure.details}
                break
        if failure is not None:
            self._rollback(record, failure)
            raise failure
        record["state"] = "ready"
        record["updatedAt"] = now_rfc3339()
        with self.state.locked():
            self.state.put_attachment(record)
            self._publish_facts(record)
        log.info(f"ADD attached {', '.join(d['ifName'] for d in record['devices'])}")
        if req.prev_result is not None:
            return req.conf["prevResult"]
        return from_current(merge_results([d["result"] for d in record["devices"]]), req.cni_version)

    def _add_device(self, dev: dict) -> None:
        prev = None
        for delegate in dev["delegates"]:
            conf = dict(delegate["config"])
            if prev is not None:
                conf["prevResult"] = from_current(prev, delegate["cniVersion"])
            binary = self.runner.find(delegate["type"])
            result = self.runner.exec(binary, "ADD", conf, ifname=dev["ifName"],
                                      container_id=self.req.container_id, netns=self.req.netns)
            delegate["added"] = True
            if result is None:
                raise CNIError(E.DELEGATE_FAILED, f"delegate {delegate['type']} ADD printed no result")
            prev = to_current(result, result.get("cniVersion") or delegate["cniVersion"])
            delegate["result"] = prev
        dev["result"] = prev
        if dev.get("requestedIPs"):
            self._check_pinned(dev)

    @staticmethod
    def _check_pinned(dev: dict) -> None:
        """Never hand out a different address than the one the claim keeps."""
        from ..addresses import missing_addresses, result_addresses

        returned = result_addresses(dev["result"])
        if missing_addresses(dev["requestedIPs"], returned):
            source = f"IPAMClaim {dev['ipamClaim']}" if dev.get("ipamClaim") else "the claim's status"
            raise CNIError(E.DELEGATE_FAILED,
                           f"IPAM returned {', '.join(returned) or 'no address'} but {source} keeps "
                           f"{', '.join(dev['requestedIPs'])} for this attachment; refusing a different address",
                           "the IPAM must grant requested addresses (host-local: when free and in range; "
                           "static: always)")

    def _rollback(self, record: dict, failure: CNIError) -> None:
        """DEL everything this ADD created, then record the failure for status and DEL."""
        for dev in reversed(record["devices"]):
            for problem in self._del_device(dev):
                log.warning(f"rollback: {problem}")
        record["state"] = "failed"
        record["error"] = {"code": failure.code, "msg": failure.msg, "details": failure.details}
        record["updatedAt"] = now_rfc3339()
        for dev in record["devices"]:
            if dev["error"] is None:
                dev["error"] = {"code": failure.code, "msg": f"rolled back: {failure.msg}", "details": ""}
            dev["result"] = None
        with self.state.locked():
            self.state.put_attachment(record)
            self._publish_facts(record)
        log.error(f"ADD failed and was rolled back: {failure.msg}")

    def _passthrough_result(self) -> dict:
        if self.req.prev_result is not None:
            return self.req.conf["prevResult"]
        return {"cniVersion": self.req.cni_version, "dns": {}}

    # -- DEL ------------------------------------------------------------------------------
    def delete(self) -> None:
        req = self.req
        record = self.state.read_attachment(req.network, req.container_id, req.ifname)
        if record is None:
            self._delete_without_record()
            return
        problems = []
        for dev in reversed(record["devices"]):
            problems += self._del_device(dev)
        if problems:
            self.state.put_attachment(record)  # remember what was released; the runtime retries DEL
            raise CNIError(E.TRY_AGAIN_LATER, f"DEL incomplete: {problems[0]}", "; ".join(problems[1:]))
        with self.state.locked():
            self.state.remove_attachment(req.network, req.container_id, req.ifname)
            self._retract_facts(record)
        log.info(f"DEL detached {', '.join(d['ifName'] for d in record['devices']) or 'nothing'}")

    def _del_device(self, dev: dict, *, container_id: str | None = None, netns: str | None = None,
                    cni_args: str | None = None) -> list[str]:
        """DEL every delegate of one device in reverse order; return the failures that matter.

        DEL runs for every delegate, also those whose ADD failed or never ran (DEL is
        idempotent and an ADD may fail half-way).  But only a delegate whose ADD succeeded
        and was not yet released can hold something: its DEL errors are returned so the
        runtime retries; others are logged (Debian's macvlan, for one, fails DEL when its
        master link is gone, which would otherwise wedge the pod forever).
        """
        problems = []
        result = dev.get("result")
        for delegate in reversed(dev["delegates"]):
            conf = dict(delegate["config"])
            if result is not None:
                conf["prevResult"] = from_current(result, delegate["cniVersion"])
            try:
                binary = self.runner.find(delegate["type"])
                self.runner.exec(binary, "DEL", conf, ifname=dev["ifName"],
                                 container_id=self.req.container_id if container_id is None else container_id,
                                 netns=self.req.netns if netns is None else netns, cni_args=cni_args)
                delegate["added"] = False
            except CNIError as exc:
                if delegate.get("added"):
                    problems.append(f"{dev['ifName']}: {exc.msg}")
                else:
                    log.warning(f"DEL of {dev['ifName']} delegate {delegate['type']} (never added): {exc.msg}")
        return problems

    def _delete_without_record(self) -> None:
        """The attachment record is gone (state dir wiped): DEL from the prepared claims, best effort."""
        req = self.req
        claims = self.state.pod_claims(req.pod_uid, req.pod_namespace, req.pod_name)
        if not claims:
            log.debug("DEL: nothing recorded for this container and no prepared claims: nothing to do")
            return
        try:
            planned = self.plan(claims)
        except CNIError as exc:
            log.warning(f"DEL without record: cannot plan from prepared claims: {exc.msg}")
            return
        for d in reversed(planned):
            try:
                dev = {"ifName": d["ifName"], "delegates": self._delegates_for(d, negotiate=True), "result": None}
            except CNIError as exc:
                log.warning(f"DEL without record: {exc.msg}")
                continue
            for problem in self._del_device(dev):
                log.warning(f"DEL without record: {problem}")
        with self.state.locked():
            for claim_uid in {d["claim"]["uid"] for d in planned}:
                if self.state.read_outbox(claim_uid) is not None:
                    self.state.update_outbox({"uid": claim_uid, "namespace": "", "name": ""},
                                             lambda facts: [f for f in facts if f.get("containerID") != req.container_id])

    # -- CHECK ----------------------------------------------------------------------------
    def check(self) -> None:
        req = self.req
        if not at_least(req.cni_version, "0.4.0"):
            raise CNIError(E.INCOMPATIBLE_VERSION, f"cniVersion {req.cni_version} does not support CHECK (needs 0.4.0+)")
        record = self.state.read_attachment(req.network, req.container_id, req.ifname)
        if record is None:
            if self.state.pod_claim_uids(req.pod_uid, req.pod_namespace, req.pod_name):
                raise CNIError(E.UNKNOWN_CONTAINER,
                               f"no attachment recorded for container {req.container_id} although the pod has claims")
            return
        if record["state"] != "ready":
            raise CNIError(E.TRY_AGAIN_LATER, f"attachment of container {req.container_id} is {record['state']}")
        from .netcheck import missing_interfaces  # deferred: pyroute2 is heavy

        missing = missing_interfaces(req.netns, [d["ifName"] for d in record["devices"]])
        if missing:
            raise CNIError(E.UNKNOWN_CONTAINER, f"interface {missing[0]} is missing from netns {req.netns}",
                           f"missing: {', '.join(missing)}")
        for dev in record["devices"]:
            for delegate in dev["delegates"]:
                if not at_least(delegate["cniVersion"], "0.4.0"):
                    continue
                conf = dict(delegate["config"])
                if dev.get("result") is not None:
                    conf["prevResult"] = from_current(dev["result"], delegate["cniVersion"])
                binary = self.runner.find(delegate["type"])
                self.runner.exec(binary, "CHECK", conf, ifname=dev["ifName"], container_id=req.container_id,
                                 netns=req.netns)

    # -- GC -------------------------------------------------------------------------------
    def gc(self) -> None:
        req = self.req
        valid = _valid_attachments(req.conf)
        problems = []
        kept = []
        for record in self.state.list_attachments(req.network):
            if (record["containerID"], record["ifName"]) in valid:
                kept.append(record)
                continue
            log.info(f"GC: releasing stale attachment of container {record['containerID']}")
            problems += self._gc_attachment(record)
        problems += self._forward_gc(kept)
        if problems:
            raise CNIError(E.TRY_AGAIN_LATER, f"GC incomplete: {problems[0]}", "; ".join(problems[1:]))

    def _gc_attachment(self, record: dict) -> list[str]:
        problems = []
        for dev in reversed(record["devices"]):
            problems += [f"container {record['containerID']} {p}" for p in self._del_device(
                dev, container_id=record["containerID"], netns=record.get("netns", ""),
                cni_args=record.get("cniArgs", ""))]
        if not problems:
            with self.state.locked():
                self.state.remove_attachment(record["network"], record["containerID"], record["ifName"])
                self._retract_facts(record)
        return problems

    def _forward_gc(self, kept: list[dict]) -> list[str]:
        """GC each delegate network that speaks 1.1.0, listing the attachments still valid."""
        networks: dict[tuple[str, str], dict] = {}
        for claim in self.state.list_claims():
            for spec in claim.get("devices", []):
                for plugin in spec["config"]["plugins"]:
                    networks.setdefault((spec["config"]["name"], plugin.get("type")), {"plugin": plugin, "valid": []})
        for record in kept:
            for dev in record["devices"]:
                for delegate in dev["delegates"]:
                    entry = networks.setdefault((delegate["config"]["name"], delegate["type"]),
                                                {"plugin": delegate["config"], "valid": []})
                    entry["valid"].append({"containerID": record["containerID"], "ifname": dev["ifName"]})
        problems = []
        for (network, plugin_type), entry in sorted(networks.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
            try:
                binary = self.runner.find(plugin_type)
                if "1.1.0" not in self.runner.supported_versions(binary):
                    continue
                conf = delegate_config(entry["plugin"], network=network, version="1.1.0", runtime_config={},
                                       extra_capabilities={}, prev_result=None)
                conf["cni.dev/valid-attachments"] = entry["valid"]
                self.runner.exec(binary, "GC", conf, ifname="", container_id="", netns="", cni_args="")
            except CNIError as exc:
                problems.append(f"GC of delegate network {network} ({plugin_type}): {exc.msg}")
        return problems

    # -- STATUS ---------------------------------------------------------------------------
    def status(self) -> None:
        from ..state.store import StateError

        try:
            self.state.check_usable()
        except StateError as exc:
            raise CNIError(E.NOT_AVAILABLE, f"dracni cannot serve ADD: {exc}") from None

    # -- status facts ---------------------------------------------------------------------
    def _publish_facts(self, record: dict) -> None:
        """Upsert this attachment's device facts into each claim's status outbox."""
        for claim_uid, devices in _by_claim(record).items():
            facts = [_fact(record, dev) for dev in devices]
            keys = {_fact_key(f) for f in facts}
            claim = dict(devices[0]["claim"], driver=devices[0].get("driver"))
            self.state.update_outbox(claim, lambda old, facts=facts, keys=keys:
                                     [f for f in old if _fact_key(f) not in keys] + facts)

    def _retract_facts(self, record: dict) -> None:
        """After DEL: our entries go, but a persistent attachment's addresses stay, Detached."""
        cid = record["containerID"]
        for claim_uid, devices in _by_claim(record).items():
            detached = [_detached_fact(record, dev) for dev in devices if dev.get("persistentIPs")]
            detached = [f for f in detached if f["keptIPs"]]
            if self.state.read_outbox(claim_uid) is None and not detached:
                continue
            keys = {_fact_key(f) for f in detached}
            claim = dict(devices[0]["claim"], driver=devices[0].get("driver"))
            self.state.update_outbox(claim, lambda old, keys=keys, detached=detached: [
                f for f in old if f.get("containerID") != cid and _fact_key(f) not in keys] + detached)


def _by_claim(record: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for dev in record["devices"]:
        out.setdefault(dev["claim"]["uid"], []).append(dev)
    return out


def _fact_key(fact: dict) -> tuple:
    return fact["pool"], fact["device"], fact.get("shareID")


def _fact(record: dict, dev: dict) -> dict:
    fact = {
        "request": dev["request"], "pool": dev["pool"], "device": dev["device"], "shareID": dev.get("shareID"),
        "ifName": dev["ifName"], "ready": record["state"] == "ready" and dev.get("error") is None,
        "result": dev.get("result"), "error": dev.get("error"), "containerID": record["containerID"],
        "podUID": (record.get("pod") or {}).get("uid"), "podName": (record.get("pod") or {}).get("name"),
        "updatedAt": record["updatedAt"],
    }
    if dev.get("persistentIPs"):
        fact["ipamClaim"] = dev.get("ipamClaim")
        fact["keptIPs"] = list(dev.get("requestedIPs") or [])
    return fact


def _detached_fact(record: dict, dev: dict) -> dict:
    """A persistent attachment after DEL: Ready=False (Detached), its addresses kept."""
    from ..addresses import result_addresses

    fact = _fact(record, dev)
    fact.update(ready=False, detached=True, result=None, error=None, updatedAt=now_rfc3339(),
                keptIPs=result_addresses(dev.get("result")) or list(dev.get("requestedIPs") or []))
    return fact


def _valid_attachments(conf: dict) -> set[tuple[str, str]]:
    key = "cni.dev/valid-attachments" if "cni.dev/valid-attachments" in conf else "cni.dev/attachments"
    entries = conf.get(key)
    if entries is None:
        raise CNIError(E.INVALID_CONFIG, "cni.dev/valid-attachments: required for GC")
    if not isinstance(entries, list):
        raise CNIError(E.INVALID_CONFIG, f"{key}: must be a list of {{containerID, ifname}} objects")
    valid = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("containerID"), str) \
                or not isinstance(entry.get("ifname"), str):
            raise CNIError(E.INVALID_CONFIG, f"{key}[{i}]: must be an object with string containerID and ifname")
        valid.add((entry["containerID"], entry["ifname"]))
    return valid


def merge_results(results: list[dict]) -> dict:
    """One result listing every interface, address and route of several delegate chains."""
    merged: dict = {"cniVersion": LATEST, "interfaces": [], "ips": [], "routes": [], "dns": {}}
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


def state_dir_for(req: Request, flag: str | None = None) -> str:
    from ..defaults import STATE_DIR

    return flag or req.option("stateDir") or os.environ.get("DRACNI_STATE_DIR") or STATE_DIR
