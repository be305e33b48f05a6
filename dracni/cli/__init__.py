"""Operator commands of the dracni bundle (click): one group, its commands in the modules beside.

Clusterless use reads ResourceClaim manifests from files: ``prepare``/``unprepare`` fill and
clear the state dir the CNI plugin reads, ``publish-status`` drains the status outbox into
``*.status.json`` files next to the manifests, ``inspect`` shows the state dir.
"""

from __future__ import annotations

import click

from .. import __version__
from .claims import inspect, prepare, publish_status, unprepare, validate
from .convert import convert_command
from .node import install, inventory, uninstall
from .service import kubelet_plugin


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dracni")
def main() -> None:
    """dracni: Kubernetes DRA network attachments through CNI."""


for _command in (
    prepare,
    unprepare,
    publish_status,
    inspect,
    validate,
    kubelet_plugin,
    install,
    uninstall,
    inventory,
    convert_command,
):
    main.add_command(_command)

__all__ = ["install", "kubelet_plugin", "main"]
