"""The claim-parameter schema runs compiled (fastjsonschema) and, to word a refusal, through
jsonschema (``dracni.paramschema.schema_problem``): the two must give the same verdict.  Held here
over generated parameters near the schema's shapes, seeded (``derandomize``), so that the
verdicts are the same on every run."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dracni.params import validate_parameters
from dracni.paramschema import _validator
from dracni.paramschema import fast_check as _fast_check
from dracni.specfiles import load_json_spec


def _keys_of(node: object, into: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                into.update(value)
            _keys_of(value, into)
    elif isinstance(node, list):
        for item in node:
            _keys_of(item, into)
    return into


#: Every property name the schema knows, so that generated objects hit its branches.
KEYS = sorted(_keys_of(load_json_spec("claim-parameters.schema.json"), set()))
STRINGS = [
    "dracni.io/v1alpha1",
    "cni.networking.x-k8s.io/v1alpha1",
    "NetworkAttachment",
    "CNI",
    "macvlan",
    "host-local",
    "a/b",
    "",
    "net1",
    "0.3.1",
    "1.0.0",
    "1.1.0",
    "2.0.0",
    "lan",
    "-lan",
    '{"type": "macvlan"}',
    "x" * 20,
]
scalars = st.none() | st.booleans() | st.integers(-2, 5000) | st.floats(allow_nan=False) | st.sampled_from(STRINGS)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), children, max_size=5)
    ),
    max_leaves=14,
)
good_plugin = st.fixed_dictionaries(
    {"type": st.sampled_from(["macvlan", "bridge", "host-device"])},
    optional={
        "name": st.sampled_from(["lan", "net-1"]),
        "cniVersion": st.sampled_from(["1.0.0", "0.3.1"]),
        "master": st.just("eth1"),
        "ipam": st.just({"type": "host-local", "subnet": "10.0.0.0/24"}),
    },
)
good_conflist = st.fixed_dictionaries(
    {"name": st.sampled_from(["lan", "net-1"]), "plugins": st.lists(good_plugin, min_size=1, max_size=2)},
    optional={"cniVersion": st.sampled_from(["1.0.0", "0.4.0"])},
)
good = st.one_of(
    st.fixed_dictionaries(
        {"apiVersion": st.just("dracni.io/v1alpha1"), "kind": st.just("NetworkAttachment")},
        optional={
            "ifName": st.sampled_from(["net1", None]),
            "config": good_plugin | good_conflist,
            "runtimeConfig": st.just({"mac": "02:00:00:00:00:01"}),
            "capabilities": st.just({"mac": True}),
            "persistentIPs": st.booleans(),
            "ipamClaim": st.just("claim-1"),
        },
    ),
    st.fixed_dictionaries(
        {
            "apiVersion": st.just("cni.networking.x-k8s.io/v1alpha1"),
            "kind": st.just("CNI"),
            "ifName": st.just("net1"),
            "config": good_conflist | good_plugin,
        }
    ),
)


def _places(node: object, into: list[tuple[dict | list, object]]) -> list[tuple[dict | list, object]]:
    """Every (container, key or index) in ``node``, depth first, in a fixed order."""
    if isinstance(node, dict):
        for key in list(node):
            into.append((node, key))
            _places(node[key], into)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            into.append((node, i))
            _places(item, into)
    return into


@st.composite
def mutated(draw: st.DrawFn) -> dict:
    """A valid parameter object with one place replaced by an arbitrary value, or removed."""
    params = copy.deepcopy(draw(good))  # st.just values are shared between examples
    places = _places(params, [])
    container, key = places[draw(st.integers(0, len(places) - 1))]
    if draw(st.booleans()) and isinstance(container, dict):
        del container[key]  # type: ignore[arg-type]
    else:
        container[key] = draw(values)  # type: ignore[index]
    return params


random_parameters = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["dracni.io/v1alpha1", "cni.networking.x-k8s.io/v1alpha1", "v1", 1]),
        "kind": st.sampled_from(["NetworkAttachment", "CNI", "Other"]),
    },
    optional=dict.fromkeys(("ifName", "config", "network", "runtimeConfig", "persistentIPs", "extra"), values),
)
parameters = st.one_of(good, mutated(), random_parameters)


@settings(max_examples=1500, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(parameters)
def test_the_compiled_schema_and_jsonschema_agree(params: dict) -> None:
    reference = not any(True for _ in _validator().iter_errors(params))
    assert _fast_check(params) == reference, params


def test_the_corpus_has_both_verdicts() -> None:
    """The generator reaches valid parameters too (else the agreement says little)."""
    valid = {"apiVersion": "dracni.io/v1alpha1", "kind": "NetworkAttachment", "network": "lan"}
    assert _fast_check(valid)
    assert validate_parameters(valid)["network"] == "lan"
    assert not _fast_check(valid | {"extra": 1})
