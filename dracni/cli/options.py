"""What the commands share: the common options and the claim-manifest helpers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from .. import defaults

if TYPE_CHECKING:
    from ..claims.manifests import ManifestClaimSource
    from ..state.store import StateDir

state_dir_option = click.option(
    "--state-dir",
    envvar="DRACNI_STATE_DIR",
    default=defaults.STATE_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="On-node state directory shared with the CNI plugin.",
)
driver_option = click.option(
    "--driver",
    envvar="DRACNI_DRIVER",
    default=defaults.DRIVER,
    show_default=True,
    help="DRA driver name: opaque configs and status entries of this driver are ours.",
)


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
