"""Operator commands of the dracni bundle (click)."""

from __future__ import annotations

import click


@click.group()
def main() -> None:
    """dracni: Kubernetes DRA network attachments through CNI."""
