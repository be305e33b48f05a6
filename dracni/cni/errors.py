"""CNI error codes and the error type every failure of the plugin is turned into."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # the CNI hot path imports this module: no typing at run time
    from typing import Any

# Well-known error codes of the CNI specification (section "Error").
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50
NOT_AVAILABLE_LIMITED = 51
INTERNAL = 999
#: First plugin-specific code; dracni uses it for a delegate plugin's failure.
DELEGATE_FAILED = 100


class CNIError(Exception):
    """A failure reported to the runtime as ``{"cniVersion","code","msg","details"}``."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_dict(self, cni_version: str) -> dict[str, Any]:
        out: dict[str, Any] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CNIError:
        code = data.get("code")
        return cls(
            code if isinstance(code, int) else INTERNAL, str(data.get("msg", "")), str(data.get("details", "") or "")
        )

    def __repr__(self) -> str:
        return f"CNIError({self.code}, {self.msg!r})"
