"""The service follows the node's links without forking (issue 20, item 3).

With ``--nic-netns``, the service used to fork a child into the node's netns (pyroute2's
``NetNS``) for every slice reconcile a netlink event caused, beside gRPC's threads: gRPC logged
``fork_posix.cc:71] Other threads are currently calling into gRPC, skipping fork() handlers``
2-3 times per pod start, in its own format among the JSON lines.  A burst of 20 pod starts
(prepare, then a macvlan ADD on eth1: link events in the node's netns) through the frozen
service: nothing forks, and every line the service writes is a JSON log record.
"""

from __future__ import annotations

import json
import time
import uuid

from tests import procs
from tests.integration.service import (
    ServiceProcess,
    claim_ref,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    wait_for,
)

PODS = 20
CHOICE = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "ifName": "net1"}


def _children(service: ServiceProcess) -> list[str]:
    """Processes in the service's process group other than the service itself."""
    assert service.proc is not None
    return [p.describe() for p in procs.snapshot().values() if p.pgid == service.proc.pid and p.pid != service.proc.pid]


def test_a_burst_of_pod_starts_forks_nothing_and_logs_only_json(lab, api):
    lab.write_conflist()
    network = macvlan_params(lab, subnet="10.10.0.0/24", network="macvlan")
    del network["config"]["plugins"][0]["master"]  # the allocated device (eth1) binds it
    service = ServiceProcess(lab, api, extra_args=("--log-format=json",))
    service.start()
    children: list[str] = []
    try:
        for index in range(PODS):  # one pod start after another, as kubelet does them
            pod_uid = new_pod_uid()
            claim = create_allocated_claim(
                api, f"net-{index}", pod_uid, CHOICE, source="FromClaim", class_params=network,
                device="eth1", share_id=str(uuid.uuid4()), pod_name=f"pod-{index}",
            )  # fmt: skip
            answers = service.kubelet.prepare([claim_ref(claim)])
            assert not [a.error for a in answers.values() if a.error]
            lab.cnitool("add", lab.pod(), pod_uid=pod_uid)  # a macvlan on eth1: link events
            children += _children(service)
        # the link events reach the slice publisher, which reconciles (it forked here before)
        time.sleep(2.0)
        children += _children(service)
        wait_for(lambda: service.readyz()[0] == 200, 5.0, "the service to stay ready")
    finally:
        service.close()
    lines = service.log().splitlines()
    assert lines, "the service logged nothing"
    found = {
        "forked children": children,
        "fork warnings": [line for line in lines if "fork" in line],
        "lines not in the JSON log format": [line for line in lines if not _json_record(line)],
    }
    assert found == {"forked children": [], "fork warnings": [], "lines not in the JSON log format": []}


def _json_record(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
