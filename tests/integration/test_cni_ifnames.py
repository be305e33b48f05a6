"""Interface names that never clash, and IPAM release when a delegate's parent NIC is gone:
the frozen dracni binary chained after ptp, driven by cnitool, with Debian's plugins as
delegates, in throwaway network namespaces (issue 12, items 4 and 5)."""

from __future__ import annotations

import json

from tests.harness import DEBIAN_CNI_DIR, container_id_for, ip
from tests.integration.conftest import addresses, ipam_reservations, macvlan, one_device_claim, result_of


def pre_existing_link(pod, name: str) -> str:
    """A link named ``name`` the pod has before dracni runs (a veth pair inside the pod); its MAC."""
    ip("link", "add", name, "type", "veth", "peer", "name", f"{name}peer", netns=pod.name)
    return pod.links()[name]["address"]


def dracni_conf(lab, **extra) -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": "podnet",
        "type": "dracni",
        "stateDir": str(lab.state_dir),
        "logFile": str(lab.log_file),
        "logLevel": "info",
        **extra,
    }


def direct(lab, command: str, pod, pod_uid: str, conf: dict):
    """dracni itself, as the runtime's chain would exec it for this pod's eth0."""
    return lab.plugin(
        command,
        conf,
        container_id=container_id_for(pod.path),
        netns=pod.path,
        ifname="eth0",
        cni_args=f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=demo;K8S_POD_UID={pod_uid}",
    )


def test_automatic_name_skips_a_link_already_in_the_pod_and_del_leaves_it(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    mac = pre_existing_link(pod, "net1")

    lab.cnitool("add", pod, pod_uid=pod_uid)
    links = pod.links()
    assert addresses(links, "net2") == ["10.10.1.2/24"]
    assert links["net1"]["address"] == mac and addresses(links, "net1") == []

    lab.cnitool("del", pod, pod_uid=pod_uid)
    links = pod.links()
    assert "net2" not in links and links["net1"]["address"] == mac  # only what dracni made is gone
    assert ipam_reservations(lab, "mv") == []


def test_automatic_name_skips_the_names_of_prev_result(lab, pod_uid):
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    prev = {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path}, {"name": "net1", "sandbox": pod.path}],
        "ips": [],
    }
    proc = direct(lab, "ADD", pod, pod_uid, dracni_conf(lab, prevResult=prev))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == prev  # chained: prevResult as received
    assert addresses(pod.links(), "net2") == ["10.10.1.2/24"]
    proc = direct(lab, "DEL", pod, pod_uid, dracni_conf(lab, prevResult=prev))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "net2" not in pod.links() and ipam_reservations(lab, "mv") == []


def test_an_explicit_name_that_exists_is_refused_before_any_delegate_runs(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)], if_name="data0"))
    pod = lab.pod()
    mac = pre_existing_link(pod, "data0")

    proc = lab.cnitool("add", pod, pod_uid=pod_uid, check=False)
    assert proc.returncode != 0
    assert "asks for 'data0', already used by a link already in the pod's netns" in proc.stderr.decode()
    assert pod.links()["data0"]["address"] == mac  # the rollback left it alone
    assert ipam_reservations(lab, "mv") == []


def test_a_repeated_add_keeps_the_first_adds_interface(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    first = result_of(lab.cnitool("add", pod, pod_uid=pod_uid))
    mac = pod.links()["net1"]["address"]

    # The runtime asks again for the same attachment (it gave up waiting on the first answer).
    proc = direct(lab, "ADD", pod, pod_uid, dracni_conf(lab, prevResult=first))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout) == first
    links = pod.links()
    assert links["net1"]["address"] == mac and addresses(links, "net1") == ["10.10.1.2/24"]
    assert "net2" not in links
    assert ipam_reservations(lab, "mv") == ["10.10.1.2"]  # no second address

    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "net1" not in pod.links() and ipam_reservations(lab, "mv") == []


def test_del_releases_the_address_when_the_parent_nic_is_gone(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    assert ipam_reservations(lab, "mv") == ["10.10.1.2"]

    ip("link", "del", "eth1", netns=lab.host.name)  # the parent NIC goes, and net1 with it
    assert "net1" not in pod.links()

    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert ipam_reservations(lab, "mv") == []
    assert not list((lab.state_dir / "attachments").iterdir())
    assert "released its IPAM (host-local) directly" in lab.read_log()


def test_del_reports_an_address_it_cannot_release_without_the_parent(lab, pod_uid):
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    lab.cnitool("add", pod, pod_uid=pod_uid)
    ip("link", "del", "eth1", netns=lab.host.name)
    (lab.bin_dir / "host-local").unlink()  # the IPAM plugin cannot run now

    proc = lab.cnitool("del", pod, pod_uid=pod_uid, check=False)
    assert proc.returncode != 0
    message = proc.stderr.decode() + proc.stdout.decode()
    assert "the address could not be released" in message
    assert ipam_reservations(lab, "mv") == ["10.10.1.2"]
    assert list((lab.state_dir / "attachments").iterdir())  # kept: the runtime retries DEL

    (lab.bin_dir / "host-local").symlink_to(DEBIAN_CNI_DIR / "host-local")  # back: the retried DEL releases
    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert ipam_reservations(lab, "mv") == []
    assert not list((lab.state_dir / "attachments").iterdir())


def test_an_add_after_an_interrupted_one_undoes_it_first_and_leaks_nothing(lab, pod_uid):
    """A killed ADD leaves its record in state "adding" with what it made (net1, an address);
    the runtime's next ADD of the same attachment DELs that first, then attaches afresh."""
    lab.write_conflist()
    lab.prepare(one_device_claim("mv", pod_uid, [macvlan(lab)]))
    pod = lab.pod()
    first = result_of(lab.cnitool("add", pod, pod_uid=pod_uid))
    (record_file,) = (lab.state_dir / "attachments").iterdir()
    record = json.loads(record_file.read_text())
    record["state"] = "adding"  # as a dracni killed before its last write leaves it
    record_file.write_text(json.dumps(record))

    proc = direct(lab, "ADD", pod, pod_uid, dracni_conf(lab, prevResult=first))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    links = pod.links()
    (address,) = ipam_reservations(lab, "mv")  # one address: the first was released
    assert addresses(links, "net1") == [f"{address}/24"] and "net2" not in links
    assert "undid the earlier adding attempt" in lab.read_log()

    lab.cnitool("del", pod, pod_uid=pod_uid)
    assert "net1" not in pod.links() and ipam_reservations(lab, "mv") == []
