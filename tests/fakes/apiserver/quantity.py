"""``resource.Quantity`` as the API server decodes, compares and re-encodes it.

From k8s ``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go``: ``ParseQuantity``
(``parseQuantityString`` and ``suffixer.interpret``: the number, then a binary-SI, decimal-SI or
``e<exponent>`` suffix; non-zero values rounded up, away from zero, to a nano; BinarySI capped at
2^63-1 and below one shown as DecimalSI), ``Cmp``, ``Add``, ``Value`` (rounded up to an integer)
and ``String``/``CanonicalizeBytes`` (the largest exponent that loses nothing: a multiple of 3 for
the decimal forms, of 1024 for BinarySI, which falls back to DecimalSI between -1024 and 1024 or
when not an integer).  A Quantity in JSON is a string or a number; anything else fails decoding
(a 400 from the server, ``QuantityError`` here).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

DECIMAL_EXPONENT = "DecimalExponent"
BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"

_SPLIT = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
#: ``ErrFormatWrong``, the error text of a quantity that does not parse.
FORMAT_WRONG = f"quantities must match the regular expression '{_SPLIT}'"
_NUMBER = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?")
_EXPONENT = re.compile(r"^[eE][-+]?[0-9]+$")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_NANO = Fraction(1, 10**9)
_MAX = Fraction(2**63 - 1)


class QuantityError(ValueError):
    """A value that does not decode as a Quantity."""


@dataclass(frozen=True)
class Quantity:
    value: Fraction
    format: str

    def cmp(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def add(self, other: Quantity) -> Quantity:
        """``Add``: the sum, in this quantity's format."""
        return Quantity(self.value + other.value, self.format)

    def int_value(self) -> int:
        """``Value()``: rounded up (away from zero) to an integer."""
        return math.ceil(self.value) if self.value >= 0 else -math.ceil(-self.value)

    def __str__(self) -> str:
        return canonical(self)


def _interpret(suffix: str) -> tuple[int, int, str] | None:
    """``suffixer.interpret``: (base, exponent, format) of a suffix."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], DECIMAL_SI
    if suffix in _BINARY:
        return 2, _BINARY[suffix], BINARY_SI
    if len(suffix) > 1 and _EXPONENT.match(suffix):
        return 10, int(suffix[1:]), DECIMAL_EXPONENT
    return None


def parse(text: str) -> Quantity:
    """``ParseQuantity``."""
    if not text:
        raise QuantityError(FORMAT_WRONG)
    if text == "0":
        return Quantity(Fraction(0), DECIMAL_SI)
    match = _NUMBER.match(text)
    assert match is not None  # every part of the pattern is optional
    sign, whole, fraction = match.group(1), match.group(2), match.group(3) or ""
    suffix = text[match.end() :]
    if not re.fullmatch(r"[eEinumkKMGTP]*[-+]?[0-9]*", suffix):
        raise QuantityError(FORMAT_WRONG)
    interpreted = _interpret(suffix)
    if interpreted is None:
        raise QuantityError("unable to parse quantity's suffix")
    if not whole and not fraction:
        raise QuantityError("unable to parse numeric part of quantity")
    base, exponent, fmt = interpreted
    amount = Fraction(int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"), 10 ** len(fraction))
    amount *= Fraction(base) ** exponent
    if amount:
        amount = math.ceil(amount / _NANO) * _NANO  # rounded up to the nano
    if fmt == BINARY_SI:
        amount = min(amount, _MAX)
        if 0 < amount < 1:
            fmt = DECIMAL_SI
    return Quantity(-amount if sign == "-" else amount, fmt)


def decode(value: Any) -> Quantity:
    """A Quantity from its JSON form (``Quantity.UnmarshalJSON``: a string or a number)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(FORMAT_WRONG)
    return parse(str(value).strip())


def _decimal(value: Fraction, fmt: str) -> str:
    """``AsCanonicalBytes`` plus the decimal suffix: mantissa * 10^exponent, exponent a multiple
    of 3, as large as it can be without a fractional mantissa."""
    exponent = -9  # every quantity is a whole number of nanos
    mantissa = int(value / _NANO)
    while mantissa % 1000 == 0:
        mantissa //= 1000
        exponent += 3
    if fmt == DECIMAL_EXPONENT:
        return f"{mantissa}" + (f"e{exponent}" if exponent else "")
    if exponent > 18:
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def canonical(quantity: Quantity) -> str:
    """``Quantity.String()`` (``CanonicalizeBytes``)."""
    value, fmt = quantity.value, quantity.format
    if value == 0:
        return "0"
    if fmt == BINARY_SI:
        if -1024 < value < 1024 or value.denominator != 1:
            fmt = DECIMAL_SI
        else:
            mantissa, exponent = int(value), 0
            while mantissa % 1024 == 0 and exponent < 60:
                mantissa //= 1024
                exponent += 10
            suffix = {v: k for k, v in _BINARY.items()}.get(exponent, "")
            return f"{mantissa}{suffix}"
    return _decimal(value, fmt)


def canonical_json(value: Any) -> Any:
    """What a Quantity field reads back as after the server's round trip (unchanged when it does
    not decode: the caller reports that)."""
    try:
        return canonical(decode(value))
    except QuantityError:
        return value
