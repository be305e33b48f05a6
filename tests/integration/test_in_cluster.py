"""The service as the DaemonSet runs it: in-cluster configuration (service environment
variables, the service account's token and CA), every request over HTTPS to an API server whose
certificate that CA signed (``tests/integration/in_cluster.py``)."""

from __future__ import annotations

from tests.integration.conftest import prepare_ok, running_api_server
from tests.integration.service import (
    NODE,
    ServiceProcess,
    create_allocated_claim,
    macvlan_params,
    new_pod_uid,
    our_status,
    wait_for,
)


def test_prepare_add_status_del_in_cluster_over_https(lab, tmp_path):
    with running_api_server(tmp_path, tls=True) as api:
        assert api.url.startswith("https://")
        lab.write_conflist()
        service = ServiceProcess(lab, api, in_cluster=True)
        try:
            service.start()  # ready: its ResourceSlices are published (a list, a watch, a create)
            pod_uid = new_pod_uid()
            claim = create_allocated_claim(api, "mv", pod_uid, macvlan_params(lab))
            prepare_ok(service.kubelet, claim)  # the claim's GET
            pod = lab.pod()
            lab.cnitool("add", pod, pod_uid=pod_uid)
            entries, _ = wait_for(lambda: our_status(api, claim), 2.0, "status.devices after ADD")  # an apply
            assert entries[0]["networkData"]["interfaceName"] == "net1"
            lab.cnitool("del", pod, pod_uid=pod_uid)
            wait_for(lambda: not our_status(api, claim), 2.0, "status.devices cleared after DEL")
        finally:
            service.close()
        mine = [r for r in api.requests if r.user_agent and r.user_agent.startswith("dracni/")]
        assert mine and all(r.user == api.user for r in mine), "every request carried the service account's token"
        assert any(r.method == "GET" and "/resourceclaims/mv" in r.path for r in mine)
        assert api.list_slices(node=NODE)
