"""The meta-plugin's operations: ADD, DEL, CHECK, GC and STATUS, as the CNI spec words them.

ADD finds the pod's prepared claims in the state dir, plans the devices, writes the
Attachment record ahead (everything DEL/CHECK/GC need), runs each device's delegate conflist
into the pod's netns (``dracni.cni.conflist``) and records the result plus the status facts
for the publisher (``dracni.state.facts``).  Without prepared claims it is a pass-through.
"""

from __future__ import annotations

from ..clock import now_rfc3339
from ..state import facts
from ..state import records as R
from . import errors as E
from .conflist import add_chain, build_chain, check_chain, del_chain, merge_results
from .delegate import DelegateRunner, RuntimeConf
from .errors import CNIError
from .log import log
from .plan import PlannedDevice, plan
from .versions import at_least, from_current, require_command_version

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..state.records import JSON, AttachedDevice, Attachment, Delegate
    from ..state.store import BadRecord, StateDir
    from .request import Request


class MetaPlugin:
    """One invocation's view of the plugin: the request, the state dir and a delegate runner."""

    def __init__(self, req: Request, state: StateDir, runner: DelegateRunner) -> None:
        self.req = req
        self.state = state
        self.runner = runner
        state.on_quarantine = lambda path, target, why: log.warning(
            f"moved an unreadable state record aside to {target}: {why}"
        )

    def _chain_of(self, device: PlannedDevice) -> list[Delegate]:
        spec = device.spec
        return build_chain(
            self.runner,
            spec["config"],
            runtime_config=spec.get("runtimeConfig") or {},
            capabilities=spec.get("capabilities") or {},
            requested_ips=R.requested_ips(spec, self.req.pod_uid),
            where=device.where,
        )

    # -- ADD ------------------------------------------------------------------------------
    def add(self, claim_uids: list[str]) -> JSON:
        """ADD for a pod whose index lists ``claim_uids`` (the dispatcher read it already)."""
        req = self.req
        claims = self.state.read_claims(claim_uids)
        if not claims:
            log.debug("no prepared claims for this pod: pass-through")
            return req.passthrough_result()
        earlier = self._read_earlier()
        if earlier is not None and earlier.get("state") == "ready":
            # A repeated ADD (the runtime gave up waiting and asked again): the first ADD's
            # interfaces are in place; running the delegates again would clash with them.
            log.info("ADD repeated for an attachment already made: answering its recorded result")
            return self._answer(earlier)
        if earlier is not None:  # an earlier attempt failed or was killed: undo what it made first
            self._undo_earlier(earlier)
        planned = plan(claims, req.ifname, self._names_in_use())
        record = R.new_attachment(req, now_rfc3339())
        for d in planned:
            record["devices"].append(
                R.attached_device(d.claim, d.driver, d.spec, d.ifname, self._chain_of(d), self.req.pod_uid)
            )
        # Write-ahead: DEL must find this record even if we die half-way through.
        self._write_ahead(record)
        failure: CNIError | None = None
        for dev in record["devices"]:
            try:
                self._add_device(dev, record)
            except CNIError as exc:
                where = f"claim {dev['claim']['namespace']}/{dev['claim']['name']} request {dev['request']}"
                failure = CNIError(exc.code, f"{where} ({dev['ifName']}): {exc.msg}", exc.details)
                dev["error"] = R.cni_error(failure.code, failure.msg, failure.details)
                break
        if failure is not None:
            self._rollback(record, failure)
            raise failure
        record["state"] = "ready"
        record["updatedAt"] = now_rfc3339()
        with self.state.locked():
            self.state.put_attachment(record)
            facts.attached(self.state, record)
        log.info(f"ADD attached {', '.join(d['ifName'] for d in record['devices'])}")
        return self._answer(record)

    def _undo_earlier(self, earlier: Attachment) -> None:
        """DEL what an earlier, unfinished ADD of this same attachment made (its names were free
        when it planned them, so they are its own), so the new ADD neither clashes with nor
        leaks them."""
        if earlier.get("state") == "adding":
            from .process import kill_leftovers

            kill_leftovers(self.req.container_id)
        problems = []
        for dev in reversed(earlier["devices"]):
            problems += self._del_device(dev)
        if problems:
            self.state.put_attachment(earlier)
            raise CNIError(
                E.TRY_AGAIN_LATER,
                f"an earlier ADD of this attachment could not be undone: {problems[0]}",
                "; ".join(problems[1:]),
            )
        log.info(f"ADD: undid the earlier {earlier.get('state')} attempt of this attachment first")

    def _answer(self, record: Attachment) -> JSON:
        """ADD's result: the chain's prevResult when there is one, else the devices' results."""
        if self.req.prev_result is not None:
            prev: JSON = self.req.conf["prevResult"]
            return prev
        results = [d["result"] for d in record["devices"] if d["result"] is not None]
        return from_current(merge_results(results), self.req.cni_version)

    def _names_in_use(self) -> dict[str, str]:
        """Interface names that exist before this ADD: prevResult's and the pod netns's links."""
        in_use = {}
        prev = self.req.prev_result or {}
        for iface in prev.get("interfaces") or []:
            if isinstance(iface.get("name"), str) and iface["name"]:
                in_use[iface["name"]] = "an interface of prevResult"
        from .netcheck import link_names

        present = link_names(self.req.netns)
        if present is None:
            log.warning(f"cannot list the links of netns {self.req.netns}: interface names not checked there")
        for name in sorted(present or ()):
            in_use.setdefault(name, "a link already in the pod's netns")
        return in_use

    def _read_earlier(self) -> Attachment | None:
        """This attachment's record from an earlier ADD, if any.  An unreadable one is moved
        aside (quarantine/) and ADD starts afresh; a newer dracni's record stays, and ADD fails
        as ``_write_ahead`` would."""
        from ..state.store import BadRecord

        req = self.req
        try:
            return self.state.read_attachment(req.network, req.container_id, req.ifname)
        except BadRecord as exc:
            if exc.newer:
                raise self._newer_record(req.container_id, exc) from None
            self.state.quarantine(exc.path)
            return None

    @staticmethod
    def _newer_record(container_id: str, exc: Exception) -> CNIError:
        return CNIError(
            E.IO_FAILURE,
            f"refusing to overwrite the attachment record of container {container_id}: {exc}",
            "a newer dracni wrote it; the runtime's DEL moves it aside (quarantine/), or upgrade dracni",
        )

    def _write_ahead(self, record: Attachment) -> None:
        """The ADD's first record write; a newer dracni's record of this attachment stays."""
        from ..state.store import BadRecord

        try:
            self.state.put_attachment(record, ahead=True)
        except BadRecord as exc:  # only a newer one: an unreadable one was quarantined
            raise self._newer_record(record["containerID"], exc) from None

    def _add_device(self, dev: AttachedDevice, record: Attachment) -> None:
        from .identity import check_device
        from .vlanguard import check_vlans

        check_device(self.state, record, dev)
        check_vlans(self.state, record, dev)
        dev["result"] = add_chain(self.runner, dev["delegates"], self._runtime(dev["ifName"]))
        if dev.get("requestedIPs"):
            self._check_pinned(dev)
        if dev.get("metadataFile"):  # device metadata (KEP-5304): networkData before the containers start
            from .devmeta import after_add

            after_add(dev)

    @staticmethod
    def _check_pinned(dev: AttachedDevice) -> None:
        """Never hand out a different address than the one the claim keeps."""
        from ..addresses import missing_addresses, result_addresses

        returned = result_addresses(dev["result"])
        if missing_addresses(dev["requestedIPs"], returned):
            kept = "the claim's status" if dev.get("persistentIPs") else "the claim's reservation"
            source = f"IPAMClaim {dev['ipamClaim']}" if dev.get("ipamClaim") else kept
            raise CNIError(
                E.DELEGATE_FAILED,
                f"IPAM returned {', '.join(returned) or 'no address'} but {source} keeps "
                f"{', '.join(dev['requestedIPs'])} for this attachment; refusing a different address",
                "the IPAM must grant requested addresses (host-local: when free and in range; static: always)",
            )

    def _rollback(self, record: Attachment, failure: CNIError) -> None:
        """DEL everything this ADD created, then record the failure for status and DEL."""
        for dev in reversed(record["devices"]):
            for problem in self._del_device(dev):
                log.warning(f"rollback: {problem}")
        record["state"] = "failed"
        record["error"] = R.cni_error(failure.code, failure.msg, failure.details)
        record["updatedAt"] = now_rfc3339()
        for dev in record["devices"]:
            if dev["error"] is None:
                dev["error"] = R.cni_error(failure.code, f"rolled back: {failure.msg}")
            dev["result"] = None
        with self.state.locked():
            self.state.put_attachment(record)
            facts.failed(self.state, record)
        log.error(f"ADD failed and was rolled back: {failure.msg}")

    # -- DEL ------------------------------------------------------------------------------
    def delete(self) -> None:
        req = self.req
        record = self._read_for_del()
        if record is None:
            self._delete_without_record()
            return
        if record.get("state") == "adding":  # the ADD never finished: its dracni was killed or crashed
            from .process import kill_leftovers

            stopped = kill_leftovers(req.container_id)
            if stopped:
                log.warning(f"DEL: stopped what the interrupted ADD left running (pids {stopped})")
        problems = []
        for dev in reversed(record["devices"]):
            problems += self._del_device(dev)
        if problems:
            self.state.put_attachment(record)  # remember what was released; the runtime retries DEL
            raise CNIError(E.TRY_AGAIN_LATER, f"DEL incomplete: {problems[0]}", "; ".join(problems[1:]))
        with self.state.locked():
            self.state.remove_attachment(req.network, req.container_id, req.ifname)
            facts.detached(self.state, record)
        log.info(f"DEL detached {', '.join(d['ifName'] for d in record['devices']) or 'nothing'}")

    def _read_for_del(self) -> Attachment | None:
        """The attachment record; an unreadable one (corrupt, a key missing, a newer schema) is
        quarantined and DEL goes on as if it were gone: it never blocks the runtime's DEL (not
        even when it cannot be moved: it stays, and every DEL goes on without it)."""
        from ..state.store import BadRecord, StateError

        req = self.req
        try:
            return self.state.read_attachment(req.network, req.container_id, req.ifname)
        except BadRecord as exc:
            try:
                self.state.quarantine(exc.path)
            except StateError as failure:
                log.warning(f"DEL goes on without an unreadable record it cannot move aside: {failure}; {exc}")
            return None

    def _runtime(self, ifname: str) -> RuntimeConf:
        """The delegates of this invocation's container run with the caller's CNI_ARGS."""
        return RuntimeConf(self.req.container_id, self.req.netns, ifname)

    def _del_device(self, dev: AttachedDevice, rt: RuntimeConf | None = None) -> list[str]:
        """DEL one device's delegates (see ``del_chain``), then its networkData from its device
        metadata file; the failures that must be retried."""
        problems = del_chain(self.runner, dev["delegates"], dev.get("result"), rt or self._runtime(dev["ifName"]))
        if dev.get("metadataFile") and not problems:
            from .devmeta import after_del

            problems += after_del(dev)
        return problems

    def _delete_without_record(self) -> None:
        """The attachment record is gone (state dir wiped): DEL from the prepared claims, best effort."""
        from ..state.store import StateError

        req = self.req
        bad: list[BadRecord] = []
        try:
            uids = self.state.pod_claim_uids(req.pod_uid, req.pod_namespace, req.pod_name)
            claims = self.state.read_claims(uids, bad)
        except StateError as exc:  # the pod index itself: nothing to rebuild from
            log.warning(f"DEL without record: cannot read the pod's prepared claims: {exc}")
            return
        for unreadable in bad:
            log.warning(f"DEL without record: skipping a prepared claim: {unreadable}")
        if not claims:
            log.debug("DEL: nothing recorded for this container and no prepared claims: nothing to do")
            return
        try:
            planned = plan(claims, req.ifname)
        except CNIError as exc:
            log.warning(f"DEL without record: cannot plan from prepared claims: {exc.msg}")
            return
        for d in reversed(planned):
            try:
                delegates = self._chain_of(d)
            except CNIError as exc:
                log.warning(f"DEL without record: {exc.msg}")
                continue
            for problem in del_chain(self.runner, delegates, None, self._runtime(d.ifname)):
                log.warning(f"DEL without record: {problem}")
        with self.state.locked():
            facts.detached_unrecorded(self.state, {d.claim["uid"] for d in planned}, req.container_id)

    # -- CHECK ----------------------------------------------------------------------------
    def check(self) -> None:
        req = self.req
        if not at_least(req.cni_version, "0.4.0"):
            raise CNIError(
                E.INCOMPATIBLE_VERSION, f"cniVersion {req.cni_version} does not support CHECK (needs 0.4.0+)"
            )
        record = self.state.read_attachment(req.network, req.container_id, req.ifname)
        if record is None:
            if self.state.pod_claim_uids(req.pod_uid, req.pod_namespace, req.pod_name):
                raise CNIError(
                    E.UNKNOWN_CONTAINER,
                    f"no attachment recorded for container {req.container_id} although the pod has claims",
                )
            return
        if record["state"] != "ready":
            raise CNIError(E.TRY_AGAIN_LATER, f"attachment of container {req.container_id} is {record['state']}")
        from .netcheck import missing_interfaces  # deferred: pyroute2 is heavy

        missing = missing_interfaces(req.netns, [d["ifName"] for d in record["devices"]])
        if missing:
            raise CNIError(
                E.UNKNOWN_CONTAINER,
                f"interface {missing[0]} is missing from netns {req.netns}",
                f"missing: {', '.join(missing)}",
            )
        for dev in record["devices"]:
            check_chain(self.runner, dev["delegates"], dev.get("result"), self._runtime(dev["ifName"]))

    # -- GC -------------------------------------------------------------------------------
    def gc(self) -> None:
        from .gc import forward_gc, valid_attachments  # deferred: only GC needs them

        req = self.req
        require_command_version(req.cni_version, "GC")
        valid = valid_attachments(req.conf)
        problems: list[str] = []
        kept: list[Attachment] = []
        bad: list[BadRecord] = []
        records = self.state.list_attachments(req.network, bad)
        for unreadable in bad:  # nothing to release from it: out of the way of later GCs
            self.state.quarantine(unreadable.path)
        for record in records:
            if (record["containerID"], record["ifName"]) in valid:
                kept.append(record)
                continue
            log.info(f"GC: releasing stale attachment of container {record['containerID']}")
            problems += self._gc_attachment(record)
        problems += forward_gc(self.runner, self.state, kept)
        if problems:
            raise CNIError(E.TRY_AGAIN_LATER, f"GC incomplete: {problems[0]}", "; ".join(problems[1:]))

    def _gc_attachment(self, record: Attachment) -> list[str]:
        problems = []
        cid, netns, args = record["containerID"], record.get("netns", ""), record.get("cniArgs", "")
        for dev in reversed(record["devices"]):
            rt = RuntimeConf(cid, netns, dev["ifName"], args)
            problems += [f"container {cid} {p}" for p in self._del_device(dev, rt)]
        if not problems:
            with self.state.locked():
                self.state.remove_attachment(record["network"], record["containerID"], record["ifName"])
                facts.detached(self.state, record)
        return problems

    # -- STATUS ---------------------------------------------------------------------------
    def status(self) -> None:
        """Can dracni serve ADD?  Never creates the state dir (a missing one: can ADD make it?)."""
        import os

        from ..state.store import StateError

        require_command_version(self.req.cni_version, "STATUS")
        root = self.state.root
        existing = root
        while not os.path.lexists(existing) and existing != os.path.dirname(existing):
            existing = os.path.dirname(existing)
        if existing != root:  # ADD would create it: can it?
            if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
                raise CNIError(
                    E.NOT_AVAILABLE,
                    f"dracni cannot serve ADD: state directory {root} does not exist and cannot be created "
                    f"({existing} is not a writable directory)",
                )
            return
        try:
            self.state.check_usable()
        except StateError as exc:
            raise CNIError(E.NOT_AVAILABLE, f"dracni cannot serve ADD: {exc}") from None
