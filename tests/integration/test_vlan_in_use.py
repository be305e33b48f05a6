"""A VLAN in use on a parent is never a tenant's to take (issue 22, rule sharedParent): under
``claimConfigs: full`` a second claim running Debian's vlan plugin with the same VLAN ID on the
same NIC is refused by dracni's ADD, naming the first user, before the kernel's bare "file
exists" (net/8021q ``vlan_check_real_dev``), and its pod is left without the interface; another
VLAN ID on that NIC still works.  Through the frozen binary, cnitool and Debian's plugins."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness import Lab, attachment_params, claim_manifest, ip
from tests.integration.conftest import addresses
from tests.integration.service import new_pod_uid

FULL = ("--claim-configs=full",)


@pytest.fixture
def lab(tmp_path: Path):
    world = Lab(base=tmp_path, nics=("eth1", "eth2"))
    try:
        world.write_conflist()
        probe = ip(
            "link",
            "add",
            "link",
            "eth1",
            "name",
            "vprobe",
            "type",
            "vlan",
            "id",
            "4000",
            netns=world.host.name,
            check=False,
        )
        if probe.returncode != 0:
            pytest.skip(
                f"this kernel cannot make VLAN links (8021q not loaded or built): {probe.stderr.decode().strip()}"
            )
        ip("link", "del", "vprobe", netns=world.host.name)
        yield world
    finally:
        world.close()


def vlan_claim(name: str, pod_uid: str, vid: int, address: str) -> dict:
    plugin = {"type": "vlan", "vlanId": vid, "ipam": {"type": "static", "addresses": [{"address": address}]}}
    params = attachment_params([plugin], name=f"vlan{vid}", if_name="net1")
    entry = {"request": "net", "pool": "node1", "device": "eth1", "params": params}
    return claim_manifest(name, pod_uid=pod_uid, devices=[entry], source="FromClaim")


def test_a_vlan_in_use_on_the_parent_is_refused_naming_its_user(lab):
    first, second, third = new_pod_uid(), new_pod_uid(), new_pod_uid()
    lab.prepare(
        vlan_claim("first", first, 100, "10.30.0.5/24"),
        vlan_claim("second", second, 100, "10.30.0.6/24"),
        vlan_claim("third", third, 101, "10.31.0.5/24"),
        args=FULL,
    )
    pods = {uid: lab.pod() for uid in (first, second, third)}
    lab.cnitool("add", pods[first], pod_uid=first)
    assert addresses(pods[first].links(), "net1") == ["10.30.0.5/24"]

    proc = lab.cnitool("add", pods[second], pod_uid=second, check=False)
    output = (proc.stdout + proc.stderr).decode()
    assert proc.returncode != 0, output
    assert re.search(
        r"config\.plugins\[0\]\.vlanId: VLAN 100 on parent eth1 is in use by container \S+'s interface net1 "
        r"\(another dracni attachment\) \(rule sharedParent: ",
        output,
    ), output
    assert set(pods[second].links()) == {"lo", "eth0"}
    print(f"refused: {output.strip()}")  # the exact message, for `pytest -s`
    lab.cnitool("del", pods[second], pod_uid=second)
    assert addresses(pods[first].links(), "net1") == ["10.30.0.5/24"], "the refused ADD's DEL took the first VLAN"

    lab.cnitool("add", pods[third], pod_uid=third)
    assert addresses(pods[third].links(), "net1") == ["10.31.0.5/24"]
    for uid in (first, third):
        lab.cnitool("del", pods[uid], pod_uid=uid)
