"""A name that ends in a number: an IPv4 address to some readers, a name to others.

WHATWG's URL parser (browsers), curl and the C resolver (``inet_aton``, which Python's
``getaddrinfo`` calls first) read a host whose last label is digits or ``0x`` hex as an
IPv4 address in any of its old forms: ``010.0.0.1`` is 8.0.0.1 (octal), ``127.1`` and
``0x7f.1`` are 127.0.0.1, ``2130706433`` too. Go's ``net.ParseIP`` and ``ipaddress``
take only dotted decimal, without leading zeros, and send the rest to DNS; RFC 1123 2.1
says no host name ends so (the top label is alphabetic). Only dotted decimal is one
address to every reader; anything else ending in a number is refused where a name goes.
"""

from __future__ import annotations

import ipaddress
import re

_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*", re.ASCII)


def ambiguous_number(name: str) -> bool:
    """Whether ``name`` ends in a number (its trailing dot aside) and is no
    dotted-decimal IPv4 address as written (``10.0.0.7`` is one, ``10.0.0.7.`` is not:
    the resolver reads it as a name)."""
    last = name.removesuffix(".").rpartition(".")[2]
    if not _NUMBER.fullmatch(last):
        return False
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return True
    return False
