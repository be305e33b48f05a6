"""Rule networkRanges at prepare: an address a claim picks lies in what the network's host-local
hands out (rangeStart..rangeEnd, as host-local's Range.Canonicalize defaults them), not only in
its subnet; static IPAM takes any address of its subnet."""

from __future__ import annotations

import ipaddress

import pytest

from dracni.params import ParameterError
from dracni.policy.netranges import in_host_local_ranges
from dracni.policy.tenant import apply_profile
from tests.unit.policy.test_shared_parent import choose, class_network

RANGED = {
    "type": "host-local",
    "ranges": [
        [{"subnet": "10.10.1.0/24", "rangeStart": "10.10.1.100", "rangeEnd": "10.10.1.200"}],
        [{"subnet": "fd10::/64", "rangeStart": "fd10::100", "rangeEnd": "fd10::1ff"}],
    ],
}
LEGACY = {"type": "host-local", "subnet": "10.30.0.0/24", "rangeStart": "10.30.0.50"}
STATIC = {"type": "static", "addresses": [{"address": "10.20.0.5/24"}]}


@pytest.mark.parametrize(
    ("ipam", "ip", "outside"),
    [
        (RANGED, "10.10.1.100", ""),
        (RANGED, "10.10.1.200", ""),
        (RANGED, "10.10.1.99", "10.10.1.100-10.10.1.200"),
        (RANGED, "10.10.1.201", "10.10.1.100-10.10.1.200"),
        (RANGED, "fd10::1ff", ""),
        (RANGED, "fd10::2", "fd10::100-fd10::1ff"),
        (LEGACY, "10.30.0.49", "10.30.0.50-10.30.0.254"),  # rangeEnd defaults to the last usable
        (LEGACY, "10.30.0.254", ""),
        (STATIC, "10.20.0.77", ""),  # static takes any address of its subnet
        ({"type": "host-local", "ranges": [[{"subnet": "10.40.0.0/24"}]]}, "10.40.0.254", ""),
    ],
)
def test_the_addresses_host_local_hands_out(ipam, ip, outside):
    assert in_host_local_ranges(ipaddress.ip_address(ip), class_network(ipam)) == outside


def test_a_pinned_address_outside_the_range_is_refused_naming_the_range():
    with pytest.raises(ParameterError) as caught:
        apply_profile(class_network(RANGED), choose("10.10.1.50/24"), "parameters")
    assert caught.value.field == "parameters.runtimeConfig.ips[0]"
    assert 'is outside the addresses network "lan" hands out (10.10.1.100-10.10.1.200)' in caught.value.reason
    assert "(rule networkRanges: " in caught.value.reason
    apply_profile(class_network(RANGED), choose("10.10.1.150/24"), "parameters")  # in range: granted
