"""ManifestClaimSource: ResourceClaims from manifest files, for clusterless use."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from dracni.claims.manifests import ClaimSourceError, ManifestClaimSource, clusterless_uid
from dracni.specfiles import spec_path


def claim_yaml(
    name: str, namespace: str | None = "ns1", uid: str | None = None, api: str = "resource.k8s.io/v1"
) -> str:
    meta = [f"  name: {name}"]
    if namespace:
        meta.append(f"  namespace: {namespace}")
    if uid:
        meta.append(f"  uid: {uid}")
    return "\n".join([f"apiVersion: {api}", "kind: ResourceClaim", "metadata:", *meta, "spec: {}"]) + "\n"


def claim_obj(name: str, namespace: str = "ns1", uid: str | None = None) -> dict:
    meta = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta}


def names(source: ManifestClaimSource) -> list[str]:
    return [f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in source.list()]


def test_directory_of_yaml_yml_and_json(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a", uid="u-a"))
    (tmp_path / "b.yml").write_text(claim_yaml("b", uid="u-b"))
    (tmp_path / "c.json").write_text(json.dumps(claim_obj("c", uid="u-c")))
    source = ManifestClaimSource(str(tmp_path))
    assert names(source) == ["ns1/a", "ns1/b", "ns1/c"]
    assert source.get("ns1", "b")["metadata"]["uid"] == "u-b"
    assert source.get_by_uid("u-c")["metadata"]["name"] == "c"
    assert source.path_of("ns1", "c") == str(tmp_path / "c.json")


def test_skipped_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a"))
    (tmp_path / "a.status.json").write_text(json.dumps(claim_obj("status-file")))
    (tmp_path / ".hidden.yaml").write_text(claim_yaml("hidden"))
    (tmp_path / "notes.txt").write_text(claim_yaml("txt"))
    (tmp_path / "a.yaml~").write_text(claim_yaml("backup"))
    (tmp_path / "dir.yaml").mkdir()
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "deep.yaml").write_text(claim_yaml("deep"))
    assert names(ManifestClaimSource(str(tmp_path))) == ["ns1/a"]


def test_single_file(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(claim_yaml("a"))
    (tmp_path / "other.yaml").write_text(claim_yaml("other"))
    source = ManifestClaimSource(str(path))
    assert names(source) == ["ns1/a"]
    assert source.path_of("ns1", "a") == str(path)


def test_multi_document_yaml_skips_other_kinds(tmp_path: Path) -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: demo\n"
    other_group = claim_yaml("foreign", api="example.com/v1")
    text = "---\n".join([claim_yaml("a"), pod, "", other_group, claim_yaml("b", namespace="ns2")])
    (tmp_path / "all.yaml").write_text(text)
    source = ManifestClaimSource(str(tmp_path))
    assert names(source) == ["ns1/a", "ns2/b"]
    assert source.path_of("ns2", "b") == str(tmp_path / "all.yaml")


@pytest.mark.parametrize("kind", ["List", "ResourceClaimList"])
def test_lists(tmp_path: Path, kind: str) -> None:
    doc = {"apiVersion": "v1", "kind": kind, "items": [claim_obj("a"), claim_obj("b")]}
    (tmp_path / "list.json").write_text(json.dumps(doc))
    assert names(ManifestClaimSource(str(tmp_path))) == ["ns1/a", "ns1/b"]


def test_yaml_list(tmp_path: Path) -> None:
    text = "apiVersion: v1\nkind: List\nitems:\n- " + claim_yaml("a").replace("\n", "\n  ").rstrip() + "\n"
    (tmp_path / "list.yaml").write_text(text)
    assert names(ManifestClaimSource(str(tmp_path))) == ["ns1/a"]


def test_missing_namespace_is_default(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a", namespace=None))
    source = ManifestClaimSource(str(tmp_path))
    assert source.get("default", "a")["metadata"]["namespace"] == "default"
    assert source.path_of("default", "a") == str(tmp_path / "a.yaml")


def test_missing_uid_is_stable_uuid5(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a"))
    first = ManifestClaimSource(str(tmp_path)).get("ns1", "a")["metadata"]["uid"]
    second = ManifestClaimSource(str(tmp_path)).get("ns1", "a")["metadata"]["uid"]
    assert first == second == clusterless_uid("ns1", "a")
    assert uuid.UUID(first).version == 5
    assert clusterless_uid("ns1", "b") != first and clusterless_uid("ns2", "a") != first
    assert ManifestClaimSource(str(tmp_path)).get_by_uid(first)["metadata"]["name"] == "a"


def test_explicit_uid_is_kept(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a", uid="6c0b1d6e-0000-4000-8000-000000000001"))
    assert ManifestClaimSource(str(tmp_path)).list()[0]["metadata"]["uid"] == "6c0b1d6e-0000-4000-8000-000000000001"


def test_timestamps_stay_strings(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a") + "status:\n  when: 2025-01-02T03:04:05Z\n")
    assert ManifestClaimSource(str(tmp_path)).list()[0]["status"]["when"] == "2025-01-02T03:04:05Z"


def test_results_are_copies(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a"))
    source = ManifestClaimSource(str(tmp_path))
    source.get("ns1", "a")["metadata"]["name"] = "changed"
    assert source.get("ns1", "a") is not None


def test_edits_are_seen(tmp_path: Path) -> None:
    source = ManifestClaimSource(str(tmp_path))
    assert source.list() == []
    (tmp_path / "a.yaml").write_text(claim_yaml("a"))
    assert names(source) == ["ns1/a"]


def test_not_found(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("a"))
    source = ManifestClaimSource(str(tmp_path))
    assert source.get("ns1", "zzz") is None
    assert source.get("other", "a") is None
    assert source.get_by_uid("nope") is None
    assert source.path_of("ns1", "zzz") is None


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ClaimSourceError, match="no such file or directory"):
        ManifestClaimSource(str(tmp_path / "absent")).list()


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: [unclosed\n")
    with pytest.raises(ClaimSourceError) as info:
        ManifestClaimSource(str(tmp_path)).list()
    assert str(info.value).startswith(f"{path}:")
    assert "invalid YAML" in str(info.value)
    line = int(str(info.value).split(":")[1])
    assert 4 <= line <= 5


def test_json_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "kind": "ResourceClaim",\n  "metadata": {,}\n}\n')
    with pytest.raises(ClaimSourceError) as info:
        ManifestClaimSource(str(tmp_path)).list()
    assert str(info.value).startswith(f"{path}:3: invalid JSON")


def test_document_not_a_mapping(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("- a\n- b\n")
    with pytest.raises(ClaimSourceError, match="bad.yaml: document 1 is not a mapping"):
        ManifestClaimSource(str(tmp_path)).list()


def test_list_items_not_a_list(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("kind: List\nitems: 3\n")
    with pytest.raises(ClaimSourceError, match="items must be a list"):
        ManifestClaimSource(str(tmp_path)).list()


def test_claim_without_name(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {}\n")
    with pytest.raises(ClaimSourceError, match="bad.yaml: a ResourceClaim has no metadata.name"):
        ManifestClaimSource(str(tmp_path)).list()


def test_duplicate_claims_name_both_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("x"))
    (tmp_path / "b.yaml").write_text(claim_yaml("x"))
    with pytest.raises(ClaimSourceError) as info:
        ManifestClaimSource(str(tmp_path)).get("ns1", "x")
    assert "ns1/x is defined twice" in str(info.value)
    assert str(tmp_path / "a.yaml") in str(info.value) and str(tmp_path / "b.yaml") in str(info.value)


def test_duplicate_uid(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(claim_yaml("x", uid="same"))
    (tmp_path / "b.yaml").write_text(claim_yaml("y", uid="same"))
    with pytest.raises(ClaimSourceError, match="reuses metadata.uid same"):
        ManifestClaimSource(str(tmp_path)).list()


def test_examples_directory() -> None:
    source = ManifestClaimSource(spec_path("examples"))
    assert set(names(source)) >= {"default/macvlan-net1", "default/bridge-net1"}
    assert source.path_of("default", "macvlan-net1") == spec_path("examples", "macvlan-claim.yaml")
