"""The two designs ``make bench`` (k) compares hand out what they claim to, on the test API server
(``tests/tools/bench_pools.py``, ``tests/tools/bench_blocks.py``): correctness only, no timing."""

from __future__ import annotations

import ipaddress

import pytest

from tests.tools.bench_blocks import PLURAL as BLOCKS
from tests.tools.bench_pools import DESIGNS, NODES, count_409, nodes_of, server


@pytest.mark.parametrize("design", DESIGNS)
def test_a_27_is_handed_out_once_and_refused_after(tmp_path, design):
    api = server(tmp_path, "api")
    nodes = nodes_of(api, design, "10.30.0.0/27", 8)
    try:
        handed = []
        for name in NODES:
            for i in range(40):
                address = nodes[name].allocate(f"{name}-{i}")
                if address is None:
                    break
                handed.append(address)
        assert len(handed) == len(set(handed))
        never = {"10.30.0.0", "10.30.0.1", "10.30.0.31"}
        assert not never & set(handed)
        assert all(ipaddress.ip_address(a) in ipaddress.ip_network("10.30.0.0/27") for a in handed)
        # every design reaches all 29 (strict blocks too: node-1 asks first and takes every block)
        assert len(handed) == 29
        nodes["node-1"].release(handed[0])  # node-1 allocated first: the first is its own
        if design == "blocks, strict":  # all blocks are node-1's: only node-1 may use the address
            assert nodes["node-2"].allocate("again") is None
            assert nodes["node-1"].allocate("again") == handed[0]
        else:
            assert nodes["node-2"].allocate("again") == handed[0]
    finally:
        for node in nodes.values():
            node.close()
        assert not api.internal_errors
        api.close()


@pytest.mark.parametrize("design", ["blocks, borrowing", "blocks, strict"])
def test_blocks_are_claimed_by_create_and_conflicts_are_retried(tmp_path, design):
    api = server(tmp_path, "api")
    nodes = nodes_of(api, design, "10.30.0.0/24", 64)
    try:
        got = [nodes[n].allocate(f"{n}-{i}") for i in range(3) for n in NODES]
        assert None not in got and len(set(got)) == 9
        blocks = api.list_custom_objects(BLOCKS)
        assert sorted(b["spec"]["node"] for b in blocks) == sorted(NODES)
        for address in got[:3]:
            nodes[NODES[got.index(address) % 3]].release(address)
        held = sum(len(b["spec"]["allocations"]) for b in api.list_custom_objects(BLOCKS))
        assert held == 6 and count_409(api) == 0
    finally:
        for node in nodes.values():
            node.close()
        assert not api.internal_errors
        api.close()


def test_a_lost_node_frees_its_strict_blocks_but_not_its_borrowing_ones(tmp_path):
    for design, left in (("blocks, strict", 0), ("blocks, borrowing", 1)):
        api = server(tmp_path, design.replace(", ", "-"))
        nodes = nodes_of(api, design, "10.30.0.0/24", 64)
        try:
            assert nodes["node-3"].allocate("x") is not None
            api.delete_node("node-3")
            assert sum(b["spec"]["node"] == "node-3" for b in api.list_custom_objects(BLOCKS)) == left
        finally:
            for node in nodes.values():
                node.close()
            api.close()
