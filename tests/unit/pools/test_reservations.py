"""AddressReservation names and bodies: one name per address, a valid DNS subdomain."""

from __future__ import annotations

import ipaddress
import re

import pytest

from dracni.pools.reservations import Holder, moved_to, parse_reservation, reservation_body, reservation_name

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@pytest.mark.parametrize(
    ("address", "name"),
    [
        ("10.10.1.7", "lan.10.10.1.7"),
        ("fd00:10:1::7", "lan.v6-fd00-10-1--7"),
        ("fd00::", "lan.v6-fd00--0"),
        ("::1", "lan.v6---1"),
        ("2001:db8:0:0:1:0:0:1", "lan.v6-2001-db8--1-0-0-1"),
    ],
)
def test_names_encode_the_address(address, name):
    assert reservation_name("lan", ipaddress.ip_address(address)) == name
    assert DNS_SUBDOMAIN.match(name)


def test_every_spelling_of_an_address_has_one_name():
    spellings = ["fd00:0:0:0:0:0:0:7", "FD00::7", "fd00::0:7"]
    assert {reservation_name("p", ipaddress.ip_address(s)) for s in spellings} == {"p.v6-fd00--7"}


HOLDER = Holder("ns", "c", "uid-1", "net", "node-1/eth1", pod_uid="pod-1", pod_name="p", keep=False)


def test_body_names_pool_address_node_holder_and_the_node_as_owner():
    body = reservation_body("lan", ipaddress.ip_address("10.0.0.5"), "node-1", "node-uid", HOLDER)
    assert body["metadata"]["name"] == "lan.10.0.0.5"
    assert body["metadata"]["labels"] == {"dracni.io/node": "node-1", "dracni.io/pool": "lan"}
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "node-uid"}
    ]
    assert body["spec"]["claim"] == {"namespace": "ns", "name": "c", "uid": "uid-1"}
    assert body["spec"]["pod"] == {"namespace": "ns", "name": "p", "uid": "pod-1"}
    parsed = parse_reservation({**body, "metadata": {**body["metadata"], "uid": "r1"}})
    assert parsed is not None and parsed.holder == HOLDER and parsed.node == "node-1" and parsed.uid == "r1"


def test_without_a_node_uid_there_is_no_owner():
    body = reservation_body("lan", ipaddress.ip_address("10.0.0.5"), "node-1", None, HOLDER)
    assert "ownerReferences" not in body["metadata"]


def test_taken_over_by_another_node():
    body = reservation_body("lan", ipaddress.ip_address("10.0.0.5"), "node-1", "uid-a", HOLDER)
    moved = moved_to(body, "node-2", "uid-b")
    assert moved["spec"]["node"] == "node-2"
    assert moved["metadata"]["labels"]["dracni.io/node"] == "node-2"
    assert moved["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-2", "uid": "uid-b"}
    ]
    assert body["spec"]["node"] == "node-1"  # the original is untouched


def test_an_object_that_is_not_a_reservation_parses_to_none():
    assert parse_reservation({"metadata": {"name": "x"}, "spec": {"pool": "p"}}) is None
