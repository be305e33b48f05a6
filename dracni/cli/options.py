"""What the commands share: the common options and the claim-manifest helpers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import defaults

if TYPE_CHECKING:
    from ..claims.manifests import ManifestClaimSource
    from ..state.store import StateDir

F = TypeVar("F", bound=Callable[..., Any])


def shown(
    flag: str, default: str, help: str, *, envvar: str | None = None, directory: bool = False
) -> Callable[[F], F]:
    """An option whose default ``--help`` shows; ``directory``: its value names a directory."""
    kind = click.Path(file_okay=False) if directory else None
    return click.option(flag, envvar=envvar, default=default, show_default=True, type=kind, help=help)


state_dir_option = shown(
    "--state-dir", defaults.STATE_DIR, "On-node state directory shared with the CNI plugin.",
    envvar="DRACNI_STATE_DIR", directory=True,
)  # fmt: skip
driver_option = shown(
    "--driver", defaults.DRIVER, "DRA driver name: opaque configs and status entries of this driver are ours.",
    envvar="DRACNI_DRIVER",
)  # fmt: skip


def state_at(state_dir: str) -> StateDir:
    from ..state.store import StateDir

    return StateDir(state_dir)


def manifests_at(path: str) -> ManifestClaimSource:
    from ..claims.manifests import ClaimSourceError, ManifestClaimSource

    source = ManifestClaimSource(path)
    try:
        source.list()
    except ClaimSourceError as exc:
        raise click.ClickException(str(exc)) from None
    return source


def select_claims(source: ManifestClaimSource, names: tuple[str, ...]) -> list[dict[str, Any]]:
    claims = source.list()
    if not names:
        return claims
    chosen = []
    for ref in names:
        namespace, _, name = ref.rpartition("/")
        claim = source.get(namespace or "default", name)
        if claim is None:
            raise click.ClickException(f"--claim {ref}: no such ResourceClaim in {source.path}")
        chosen.append(claim)
    return chosen
