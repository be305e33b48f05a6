"""The fake's only imports from dracni: the clock, the wording of field errors and the
``status.devices`` rules.

Every other rule the fake enforces is written here from the upstream sources.  These three are
shared on purpose: one RFC 3339 clock (``metav1.Time``), one wording of apimachinery field errors
(``<path>: Invalid value: ...``), and one reading of ``validateDeviceStatus`` for claim status
writes.  Keep every ``dracni`` import of the package in this module.
"""

from __future__ import annotations

from dracni.clock import format_rfc3339, now_rfc3339, parse_rfc3339
from dracni.kube import fielderrors as fe
from dracni.kube.validation import validate_status_devices

__all__ = ["fe", "format_rfc3339", "now_rfc3339", "parse_rfc3339", "validate_status_devices"]
