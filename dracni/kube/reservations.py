"""The allocator's port (``pools.allocator.ReservationStore``) on the API server: KubeApi's
AddressReservation calls, with the answers the allocator decides on (taken, failed) instead of
HTTP statuses."""

from __future__ import annotations

import logging
from typing import Any

from ..pools.allocator import StoreError, Taken
from ..pools.reservations import NODE_LABEL
from .api import ApiError, KubeApi

log = logging.getLogger(__name__)


class ApiReservations:
    """``ReservationStore`` through ``KubeApi``."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.api.create_reservation(body)
        except ApiError as exc:
            if exc.status == 409 and exc.reason in ("AlreadyExists", ""):
                raise Taken(str(exc)) from None
            raise StoreError(exc.status, str(exc)) from None

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.get_reservation(name)
        except ApiError as exc:
            raise StoreError(exc.status, str(exc)) from None

    def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.api.replace_reservation(name, body)
        except ApiError as exc:
            raise StoreError(exc.status, str(exc)) from None

    def delete(self, name: str, uid: str) -> None:
        try:
            self.api.delete_reservation(name, uid)
        except ApiError as exc:
            raise StoreError(exc.status, str(exc)) from None

    def list_node(self, node: str) -> list[dict[str, Any]]:
        try:
            return self.api.list_node_reservations(f"{NODE_LABEL}={node}")
        except ApiError as exc:
            raise StoreError(exc.status, str(exc)) from None


class NodeUid:
    """This node's Node UID, read once: the reservations' owner, so that the garbage collector
    deletes them with the Node.  A Node that does not exist (404) gives None: reservations are
    then made without an owner, and a warning says so once."""

    def __init__(self, api: KubeApi, node: str) -> None:
        self.api = api
        self.node = node
        self._uid: str | None = None
        self._missing_logged = False

    def __call__(self) -> str | None:
        if self._uid is not None:
            return self._uid
        try:
            obj = self.api.get_node(self.node)
        except ApiError as exc:
            raise StoreError(exc.status, f"cannot read Node {self.node}: {exc}") from None
        uid = ((obj or {}).get("metadata") or {}).get("uid")
        if uid:
            self._uid = str(uid)
        elif not self._missing_logged:
            log.warning("Node %s not found: address reservations get no owner (not deleted with the node)", self.node)
            self._missing_logged = True
        return self._uid
