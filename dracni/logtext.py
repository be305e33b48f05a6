"""Log lines that tenant input cannot forge: control characters written as escapes.

Used by the CNI plugin's tiny logger (hot path: nothing but ``str.translate`` here) and by the
service's text log formatter.
"""

#: Characters that could end a log line or steer a terminal, written as escapes instead: C0
#: and C1 controls, DEL and the Unicode line/paragraph separators.  Messages carry tenant
#: input (claim configs, delegate output), which must never forge a line of its own.
_CONTROLS = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)}


def escape_controls(text: str) -> str:
    """``text`` on one line: every control character as its Python escape (``\\n``, ``\\x1b``)."""
    return text.translate(_CONTROLS)
