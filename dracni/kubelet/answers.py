"""Kubelet's rule for DRA answers: every claim it asked about gets exactly one entry.

Kubelet treats a failed RPC as a failure of every claim in the batch, and a missing or unknown
claim UID in the response as an error (``pkg/kubelet/cm/dra/manager.go``
``prepareResources``).  So whatever a callback does (raise, forget a claim, answer for a claim
nobody asked about, return garbage), these functions turn it into one answer per requested
claim, an error string where something went wrong.  A claim whose UID cannot name a claim
(empty, or not a plain token) gets its own error and never reaches the callback, so it cannot
fail the rest of the batch.  The helper (``kubelet/helper.py``) applies them around the driver;
the gRPC server (``kubelet/server.py``) applies them again around whatever callback it serves
and turns the answers into kubelet's wire form.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from .driver import ClaimRef, PrepareResult

log = logging.getLogger(__name__)

#: A prepared device as the gRPC layer sends it: request, pool, device, shareID ("" if none),
#: and cdiDeviceIDs (a list) when it has a device metadata file.
DeviceAnswer = dict[str, Any]


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


def split_valid(claims: list[ClaimRef]) -> tuple[list[ClaimRef], dict[str, str]]:
    """The claims the callback may see, and uid -> error for the others."""
    valid, errors = [], {}
    for claim in claims:
        problem = uid_problem(claim.uid)
        if problem is None:
            valid.append(claim)
        else:
            errors[claim.uid] = f"{problem} (claim {_name(claim)})" if claim.name else problem
    return valid, errors


def call_guarded(
    callback: Callable[[Any], Any], arg: Any, claims: list[ClaimRef], what: str, doing: str
) -> tuple[Mapping[str, Any] | None, str]:
    """``callback(arg)``'s mapping for ``claims``, or None and the error every claim gets."""
    try:
        outcomes = callback(arg)
        if not isinstance(outcomes, Mapping):
            raise TypeError(f"{what} returned {type(outcomes).__name__}, not a mapping of claim UIDs")
    except Exception as exc:
        log.exception("%s claims %s failed", doing, _names(claims))
        return None, f"internal error: {doing} claims failed: {type(exc).__name__}: {exc}"
    extra = set(outcomes) - {c.uid for c in claims}
    if extra:  # kubelet fails the whole call on a UID it did not ask for: drop them
        log.warning("%s answered for claims kubelet did not ask for, ignored: %s", what, sorted(extra))
    return outcomes, ""


def prepare_results(claims: list[ClaimRef], outcomes: Mapping[str, Any] | None, error: str) -> dict[str, PrepareResult]:
    """One PrepareResult per claim from a callback's mapping (None: the call failed, ``error``
    for all); a well-formed outcome is kept as it is."""
    results: dict[str, PrepareResult] = {}
    for claim in claims:
        outcome = None if outcomes is None else outcomes.get(claim.uid)
        if outcomes is None:
            results[claim.uid] = PrepareResult(error=error)
        elif outcome is None:
            results[claim.uid] = PrepareResult(error=f"internal error: no outcome for claim {_name(claim)}")
        else:
            try:
                devices, failed = normalise_outcome(outcome)
            except (TypeError, ValueError) as exc:
                results[claim.uid] = PrepareResult(error=f"internal error: bad outcome for claim {_name(claim)}: {exc}")
                continue
            keep = isinstance(outcome, PrepareResult) and (outcome.error or None) == failed
            results[claim.uid] = outcome if keep else PrepareResult(devices=list(devices), error=failed)
    return results


def unprepare_results(claims: list[ClaimRef], outcomes: Mapping[str, Any] | None, error: str) -> dict[str, str | None]:
    """One error (None: done) per claim from a callback's mapping (None: the call failed)."""
    results: dict[str, str | None] = {}
    for claim in claims:
        if outcomes is None:
            results[claim.uid] = error
        elif claim.uid not in outcomes:
            results[claim.uid] = f"internal error: no outcome for claim {_name(claim)}"
        else:
            answer = outcomes[claim.uid]
            results[claim.uid] = str(answer) if answer else None
    return results


def prepare_answers(
    callback: Callable[[list[ClaimRef]], Any], claims: list[ClaimRef]
) -> dict[str, tuple[list[DeviceAnswer], str | None]]:
    """uid -> (devices, error) for every requested claim, whatever the callback does."""
    claims, invalid = split_valid(claims)
    results: dict[str, tuple[list[DeviceAnswer], str | None]] = {uid: ([], e) for uid, e in invalid.items()}
    if not claims:
        return results
    outcomes, error = call_guarded(callback, list(claims), claims, "prepare", "preparing")
    for uid, result in prepare_results(claims, outcomes, error).items():
        results[uid] = normalise_outcome(result)
    return results


def unprepare_answers(callback: Callable[[list[ClaimRef]], Any], claims: list[ClaimRef]) -> dict[str, str | None]:
    """uid -> error (None: done) for every requested claim, whatever the callback does."""
    claims, invalid = split_valid(claims)
    results: dict[str, str | None] = dict(invalid)
    if not claims:
        return results
    outcomes, error = call_guarded(callback, list(claims), claims, "unprepare", "unpreparing")
    return {**results, **unprepare_results(claims, outcomes, error)}


def normalise_outcome(outcome: Any) -> tuple[list[DeviceAnswer], str | None]:
    """(devices in wire form, None) or ([], error); TypeError or ValueError when malformed."""
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
        answer: DeviceAnswer = {
            "request": str(dev.get("request") or ""),
            "pool": str(pool),
            "device": str(device),
            "shareID": str(dev.get("shareID") or ""),
        }
        if dev.get("cdiDeviceIDs"):  # device metadata (KEP-5304) is on
            answer["cdiDeviceIDs"] = [str(i) for i in dev["cdiDeviceIDs"]]
        normalised.append(answer)
    return normalised, None


def _name(claim: ClaimRef) -> str:
    return f"{claim.namespace}/{claim.name}"


def _names(claims: list[ClaimRef]) -> str:
    return ", ".join(f"{_name(c)} ({c.uid})" for c in claims)
