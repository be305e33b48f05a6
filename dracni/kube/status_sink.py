"""The status sink of a cluster: server-side apply of this driver's ``status.devices`` entries."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..status.sink import SinkError
from .api import ApiError, KubeApi

if TYPE_CHECKING:
    from ..state.facts import ClaimRef


#: kube-apiserver's 403 (``responsewriters.forbiddenMessage``).
_FRONT_DOOR = re.compile(r'cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"')
#: The 1.36 status strategy's 422 ``field.Forbidden`` (pkg/registry/resource/utils.go
#: ``AuthorizedForDeviceStatus``/``AuthorizedForBinding``): the synthetic subresource and its verbs.
_DEVICES_FORBIDDEN = re.compile(r"status\.devices(\[\d+\])?: Forbidden: ")
_SYNTHETIC = re.compile(r'requires resource="(?P<resource>[^"]+)", verb="\[?(?P<verbs>[^"\]]*)\]?" permission')


def missing_rule(exc: ApiError, driver: str) -> str | None:
    """The RBAC rule an authorization refusal says is missing; None when ``exc`` is not one.

    A 403 names the request's own verb and resource.  A 422 is an authorization refusal only when
    it carries the granular status check's wording (other 422s refuse the entries themselves).
    """
    message = str(exc)
    if exc.status == 403:
        m = _FRONT_DOOR.search(message)
        if not m:
            return "the RBAC rule the message above names"
        return f"{{apiGroups: [{m['group']}], resources: [{m['resource']}], verbs: [{m['verb']}]}}"
    if exc.status != 422:
        return None
    m = _SYNTHETIC.search(message)
    if not m:
        # Another wording of the same check (no other status.devices rule is a Forbidden one).
        if _DEVICES_FORBIDDEN.search(message):
            return (
                f"{{apiGroups: [resource.k8s.io], resources: [resourceclaims/driver], resourceNames: [{driver}], "
                "verbs: [associated-node:patch]} (arbitrary-node:patch for a claim not pinned to this node)"
            )
        return None
    verbs = m["verbs"].split()
    named = f", resourceNames: [{driver}]" if m["resource"].endswith("/driver") else ""
    rule = (
        f"{{apiGroups: [resource.k8s.io], resources: [{m['resource']}]{named}, verbs: [{verbs[0] if verbs else '?'}]}}"
    )
    if m["resource"].endswith("/driver") and not any(v.startswith("associated-node:") for v in verbs):
        rule += (
            " (only arbitrary-node would do: the claim's allocation does not pin it to exactly this node, "
            "or the service account token does not name this node; the shipped ClusterRole grants "
            "associated-node only)"
        )
    return rule


class ApiStatusSink:
    """``StatusSink`` writing through the API server (fieldManager = driver name, force)."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def apply(self, claim: ClaimRef, driver: str, devices: list[dict[str, Any]]) -> None:
        try:
            self.api.apply_claim_status(
                claim["namespace"], claim["name"], devices, field_manager=driver, uid=claim.get("uid") or None
            )
        except ApiError as exc:
            where = f"ResourceClaim {claim['namespace']}/{claim['name']}"
            if exc.status == 404:
                # The claim is gone: there is no status left to write (or to clear).
                raise SinkError(f"{where} no longer exists", retryable=False) from None
            if exc.status == 409 and "UID in precondition" in str(exc):
                # Deleted and re-created under the same name: that claim is not this one.
                raise SinkError(
                    f"{where} was re-created (another UID): not giving it this status", retryable=False
                ) from None
            rule = missing_rule(exc, driver)
            if rule is not None:
                raise SinkError(
                    f"{where}: {exc}; missing RBAC rule: {rule}; retrying until it is granted", forbidden=True
                ) from None
            # 422: the server refuses the entries; sending them again would not change that, but
            # the drain sends them one by one (``status.drain``) so the others still get through.
            raise SinkError(f"{where}: {exc}", retryable=exc.retryable, refused=exc.status == 422) from None
