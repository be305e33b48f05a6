"""A rollback, through the frozen binary: this release meets the state records a newer release
wrote (spec/state-layout.md, Compatibility).

- Within one schema version a newer release only adds optional fields: this release reads
  records that carry fields it does not know (a PreparedClaim, an Attachment, a StatusOutbox),
  ADD, CHECK, DEL, unprepare and status publishing work, and its rewrites keep those fields.
- A record of a newer schema version is refused, with a message that says a newer dracni wrote
  it and what to do, and its bytes are never rewritten: a reader that only reads (ADD) leaves it
  in place, one that must go on without it (DEL, unprepare, the status publisher) moves it
  unchanged into quarantine/.  The node's other claims are not touched.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

from dracni.state.records import SCHEMA_VERSION
from tests.harness import container_id_for
from tests.integration.conftest import prepare_ok
from tests.integration.service import (
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)

IF_NAME = "mv0"
FUTURE = {"addedLater": {"note": "a newer release's optional field"}}


def edit(lab, path: Path, change: Callable[[dict], None]) -> None:
    """Rewrite a record as another dracni would: under the state lock, atomically."""
    with open(lab.state_dir / "state.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(path.read_text())
        change(record)
        tmp = path.with_suffix(".edit")
        tmp.write_text(json.dumps(record, indent=2))
        os.replace(tmp, path)


def paths(lab, claim: dict, pod=None) -> dict[str, Path]:
    uid = claim["metadata"]["uid"]
    out = {"claim": lab.state_dir / "claims" / f"{uid}.json", "outbox": lab.state_dir / "outbox" / f"{uid}.json"}
    if pod is not None:
        out["attachment"] = lab.state_dir / "attachments" / f"podnet+{container_id_for(pod.path)}+eth0.json"
    return out


def quarantined(lab) -> dict[str, bytes]:
    directory = lab.state_dir / "quarantine"
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())} if directory.exists() else {}


def ready_once(api, claim: dict) -> bool:
    entries = our_status(api, claim)
    return len(entries) == 1 and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in entries[0].get("conditions") or []
    )


def start(lab, api, kubelet, name: str, subnet: str):
    uid = new_pod_uid()
    claim = create_allocated_claim(api, name, uid, macvlan_params(lab, subnet=subnet, if_name=IF_NAME, network=name))
    prepare_ok(kubelet, claim)
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=uid)
    assert IF_NAME in pod.links()
    wait_for(lambda: ready_once(api, claim), 10.0, f"{name}'s status")
    return uid, claim, pod


def repeat_add(lab, pod, pod_uid: str):
    """The runtime asks again for a sandbox's ADD: dracni's plugin of the node's conflist, run
    as libcni runs it (the chain's first plugin would only refuse its own duplicate address)."""
    conflist = json.loads((lab.netconf_dir / "10-podnet.conflist").read_text())
    conf = {"cniVersion": conflist["cniVersion"], "name": conflist["name"], **conflist["plugins"][-1]}
    args = f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo;K8S_POD_INFRA_CONTAINER_ID=infra;K8S_POD_UID={pod_uid}"
    return lab.plugin(
        "ADD", conf, container_id=container_id_for(pod.path), netns=pod.path, ifname="eth0", cni_args=args
    )


def test_a_newer_releases_optional_fields_are_read_and_kept(lab, api, service):
    kubelet = service.kubelet
    uid = new_pod_uid()
    claim = create_allocated_claim(api, "fwd", uid, macvlan_params(lab, if_name=IF_NAME))
    prepare_ok(kubelet, claim)
    where = paths(lab, claim)

    def future_claim(record: dict) -> None:
        record.update(FUTURE)
        record["devices"][0]["addedLaterToo"] = [1, 2]

    edit(lab, where["claim"], future_claim)
    prepare_ok(kubelet, claim)  # kubelet sends it again (a retried pod sync): rewritten, fields kept
    record = json.loads(where["claim"].read_text())
    assert record["addedLater"] == FUTURE["addedLater"] and record["devices"][0]["addedLaterToo"] == [1, 2]

    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=uid)  # ADD reads the claim past its unknown fields
    assert IF_NAME in pod.links()
    wait_for(lambda: ready_once(api, claim), 10.0, "the claim's status")
    where = paths(lab, claim, pod)
    wait_for(lambda: json.loads(where["outbox"].read_text())["publishedSeq"] > 0, 10.0, "the status published")

    def future_attachment(record: dict) -> None:
        record.update(FUTURE)
        record["devices"][0]["addedLater"] = True
        record["devices"][0]["delegates"][0]["addedLater"] = True

    def future_outbox(record: dict) -> None:
        record.update(FUTURE)
        record["devices"][0]["addedLater"] = "fact"
        record["seq"] += 1  # a state the newer release had not published yet

    edit(lab, where["attachment"], future_attachment)
    edit(lab, where["outbox"], future_outbox)
    seq = json.loads(where["outbox"].read_text())["seq"]
    # the publisher sends it and rewrites the record (publishedSeq): the fields stay
    wait_for(lambda: json.loads(where["outbox"].read_text())["publishedSeq"] == seq, 10.0, "the outbox published")
    outbox = json.loads(where["outbox"].read_text())
    assert outbox["addedLater"] == FUTURE["addedLater"] and outbox["devices"][0]["addedLater"] == "fact"
    assert ready_once(api, claim), our_status(api, claim)

    lab.cnitool("check", pod, pod_uid=uid)
    lab.cnitool("del", pod, pod_uid=uid)
    assert IF_NAME not in pod.links() and not where["attachment"].exists()
    wait_for(lambda: not our_status(api, claim), 10.0, "the status cleared")
    assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    assert not where["claim"].exists()
    assert quarantined(lab) == {}


def test_records_of_a_newer_schema_are_refused_clearly_and_left_unchanged(lab, api, service):
    kubelet = service.kubelet
    newer = SCHEMA_VERSION + 1
    keep_uid, keep, keep_pod = start(lab, api, kubelet, "keep", "10.10.1.0/24")
    att_uid, att, att_pod = start(lab, api, kubelet, "att", "10.10.2.0/24")
    claim_uid = new_pod_uid()
    newclaim = create_allocated_claim(api, "newclaim", claim_uid, macvlan_params(lab, subnet="10.10.3.0/24"))
    prepare_ok(kubelet, newclaim)

    def bump(record: dict) -> None:
        record.update(FUTURE)
        record["schema"] = newer

    # the newer release wrote att's attachment and outbox, and newclaim's prepared claim
    at, nc = paths(lab, att, att_pod), paths(lab, newclaim)
    wait_for(lambda: json.loads(at["outbox"].read_text())["publishedSeq"] > 0, 10.0, "att's status published")
    for path in (at["attachment"], at["outbox"], nc["claim"]):
        edit(lab, path, bump)
    written = {name: at[name].read_bytes() for name in ("attachment", "outbox")} | {"claim": nc["claim"].read_bytes()}

    # kubelet sends newclaim again beside another claim (a retried pod sync): newclaim alone is
    # refused, its record left in place; the other claim is prepared
    other_uid = new_pod_uid()
    other = create_allocated_claim(api, "other", other_uid, macvlan_params(lab, subnet="10.10.5.0/24"))
    answers = kubelet.prepare([claim_ref(newclaim), claim_ref(other)])
    refused = answers[newclaim["metadata"]["uid"]].error
    assert f"schema {newer}, newer than this dracni's" in refused and "roll forward" in refused, refused
    assert not answers[other["metadata"]["uid"]].error
    assert nc["claim"].read_bytes() == written["claim"]

    # ADD of newclaim's pod: refused, the record left in place
    pod = lab.pod()
    proc = lab.cnitool("add", pod, pod_uid=claim_uid, check=False)
    message = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode != 0, message
    assert f"schema {newer}, newer than this dracni's {SCHEMA_VERSION}" in message, message
    assert "roll forward" in message, message
    assert nc["claim"].read_bytes() == written["claim"] and IF_NAME not in pod.links()
    lab.cnitool("del", pod, pod_uid=claim_uid)  # the runtime's teardown of the failed sandbox

    # a repeated ADD of att's pod (dracni's part of it): refused, the record left in place
    proc = repeat_add(lab, att_pod, att_uid)
    message = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode != 0 and "refusing to overwrite" in message and "newer dracni" in message, message
    assert at["attachment"].read_bytes() == written["attachment"]

    # the status publisher refuses att's outbox: moved aside unchanged, logged
    wait_for(lambda: not at["outbox"].exists(), 10.0, "the publisher to move att's outbox aside")
    assert "newer than this dracni's" in service.log()

    # DEL of att's pod goes on without its record (moved aside unchanged): the interface goes
    lab.cnitool("del", att_pod, pod_uid=att_uid)
    assert IF_NAME not in att_pod.links() and not at["attachment"].exists()
    # unprepare of newclaim goes on without its record (moved aside unchanged)
    for claim in (newclaim, att):
        assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    assert not nc["claim"].exists()
    assert "unprepare moved an unreadable state record aside" in service.log()
    assert not kubelet.unprepare([claim_ref(other)])[other["metadata"]["uid"]].error
    aside = quarantined(lab)
    assert sorted(aside.values()) == sorted(written.values()), sorted(aside)  # byte for byte
    assert {name.split("+", 1)[0] for name in aside} == {"attachments", "outbox", "claims"}

    # nothing else of the node was damaged: keep's records work, a new claim prepares and attaches
    assert ready_once(api, keep), our_status(api, keep)
    lab.cnitool("check", keep_pod, pod_uid=keep_uid)
    late_uid, late, late_pod = start(lab, api, kubelet, "late", "10.10.4.0/24")
    for uid, claim, pod in ((keep_uid, keep, keep_pod), (late_uid, late, late_pod)):
        lab.cnitool("del", pod, pod_uid=uid)
        assert IF_NAME not in pod.links()
        wait_for(lambda: not our_status(api, claim), 10.0, "the status cleared")  # noqa: B023
        assert not kubelet.unprepare([claim_ref(claim)])[claim["metadata"]["uid"]].error
    assert quarantined(lab) == aside
