"""Kubelet's rule for DRA answers: every claim it asked about gets exactly one entry.

Kubelet treats a failed RPC as a failure of every claim in the batch, and a missing or unknown
claim UID in the response as an error (``pkg/kubelet/cm/dra/manager.go``
``prepareResources``).  So whatever the prepare/unprepare callback does (raise, forget a
claim, answer for a claim nobody asked about, return garbage), these functions turn it into
one answer per requested claim, an error string where something went wrong.  A claim whose
UID cannot name a claim (empty, or not a plain token) gets its own error and never reaches the
callback, so it cannot fail the rest of the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from .helper import ClaimRef

log = logging.getLogger(__name__)

#: A prepared device as the gRPC layer sends it: request, pool, device, shareID ("" if none).
DeviceAnswer = dict[str, str]


def uid_problem(uid: str) -> str | None:
    """Why ``uid`` cannot be a claim's UID (None: it can).

    Kubernetes UIDs are RFC 4122 strings; dracni accepts any plain token (it keys records by
    UID), but never an empty one nor one that could name another path.
    """
    if not uid:
        return "the claim has no UID"
    if uid in (".", "..") or "/" in uid or not uid.isprintable() or len(uid) > _MAX_UID:
        return f"malformed claim UID {uid[:_MAX_UID]!r}"
    return None


_MAX_UID = 128


def _split_valid(claims: list[ClaimRef]) -> tuple[list[ClaimRef], dict[str, str]]:
    """The claims the callback may see, and uid -> error for the others."""
    valid, errors = [], {}
    for claim in claims:
        problem = uid_problem(claim.uid)
        if problem is None:
            valid.append(claim)
        else:
            errors[claim.uid] = f"{problem} (claim {claim.namespace}/{claim.name})"
    return valid, errors


def _call(
    callback: Callable[[list[ClaimRef]], Any], claims: list[ClaimRef], what: str, doing: str
) -> tuple[Mapping[str, Any] | None, str]:
    """The callback's mapping, or None and the error every claim gets."""
    try:
        outcomes = callback(list(claims))
        if not isinstance(outcomes, Mapping):
            raise TypeError(f"{what} returned {type(outcomes).__name__}, not a mapping of claim UIDs")
    except Exception as exc:
        log.exception("%s claims %s failed", doing, _names(claims))
        return None, f"internal error: {doing} claims failed: {type(exc).__name__}: {exc}"
    extra = set(outcomes) - {c.uid for c in claims}
    if extra:  # kubelet fails the whole call on a UID it did not ask for: drop them
        log.warning("%s answered for claims kubelet did not ask for, ignored: %s", what, sorted(extra))
    return outcomes, ""


def prepare_answers(
    callback: Callable[[list[ClaimRef]], Any], claims: list[ClaimRef]
) -> dict[str, tuple[list[DeviceAnswer], str | None]]:
    """uid -> (devices, error) for every requested claim, whatever the callback does."""
    claims, invalid = _split_valid(claims)
    results: dict[str, tuple[list[DeviceAnswer], str | None]] = {uid: ([], e) for uid, e in invalid.items()}
    if not claims:
        return results
    outcomes, error = _call(callback, claims, "prepare", "preparing")
    if outcomes is None:
        return {**results, **{c.uid: ([], error) for c in claims}}
    for claim in claims:
        outcome = outcomes.get(claim.uid)
        if outcome is None:
            results[claim.uid] = ([], f"internal error: no outcome for claim {claim.namespace}/{claim.name}")
            continue
        try:
            results[claim.uid] = _normalise_outcome(outcome)
        except (TypeError, ValueError) as exc:
            results[claim.uid] = ([], f"internal error: bad outcome for claim {claim.namespace}/{claim.name}: {exc}")
    return results


def unprepare_answers(callback: Callable[[list[ClaimRef]], Any], claims: list[ClaimRef]) -> dict[str, str | None]:
    """uid -> error (None: done) for every requested claim, whatever the callback does."""
    claims, invalid = _split_valid(claims)
    results: dict[str, str | None] = dict(invalid)
    if not claims:
        return results
    outcomes, error = _call(callback, claims, "unprepare", "unpreparing")
    if outcomes is None:
        return {**results, **{c.uid: error for c in claims}}
    for claim in claims:
        if claim.uid not in outcomes:
            results[claim.uid] = f"internal error: no outcome for claim {claim.namespace}/{claim.name}"
            continue
        answer = outcomes[claim.uid]
        results[claim.uid] = str(answer) if answer else None
    return results


def _normalise_outcome(outcome: Any) -> tuple[list[DeviceAnswer], str | None]:
    error = getattr(outcome, "error", None)
    if error:
        return [], str(error)
    devices = getattr(outcome, "devices", None)
    if devices is None:
        raise TypeError(f"{type(outcome).__name__} has no devices")
    normalised = []
    for dev in devices:
        if not isinstance(dev, Mapping):
            raise TypeError(f"device entry {dev!r} is not a mapping")
        pool, device = dev.get("pool"), dev.get("device")
        if not pool or not device:
            raise ValueError(f"device entry {dict(dev)!r} lacks pool or device")
        normalised.append(
            {
                "request": str(dev.get("request") or ""),
                "pool": str(pool),
                "device": str(device),
                "shareID": str(dev.get("shareID") or ""),
            }
        )
    return normalised, None


def _names(claims: list[ClaimRef]) -> str:
    return ", ".join(f"{c.namespace}/{c.name} ({c.uid})" for c in claims)
