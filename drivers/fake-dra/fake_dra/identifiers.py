"""What identifies a device to the outside: its UUID, serial, interface, hardware address and IP address.

`reference` (the default) gives the shapes the reference driver always had: `gpu-<node>-<i>` UUIDs, `fake<i>`
interfaces, locally administered MACs and documentation-range IPv4 addresses. `words` (`--device-id-format=words`)
gives values of a shape no pattern knows, `zq7-` and three words, as a driver nobody foresaw might: what masks
them must find them by where they sit (status.devices[].data, networkData, serial-like attributes), never by what
they look like. Its addresses are IPv6 in the documentation range, in the canonical CIDR form the API requires.
"""

from __future__ import annotations

import hashlib

REFERENCE = "reference"
WORDS = "words"
ID_FORMATS = (REFERENCE, WORDS)
# Every value of the `words` format starts with this; no IP, MAC, UUID or hex pattern matches it.
WORDS_PREFIX = "zq7"
_WORDS = (
    "amber",
    "bristle",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "gable",
    "heron",
    "islet",
    "juniper",
    "kestrel",
    "lumen",
    "moraine",
    "nimbus",
    "opal",
    "quill",
)


def word_id(kind: str, node: str, index: int) -> str:
    """A `words` value, stable per kind, node and device index: `zq7-<word>-<word>-<word>-<index as a word>`."""
    digest = hashlib.sha256(f"{kind}/{node}".encode()).digest()
    picked = [_WORDS[byte % len(_WORDS)] for byte in digest[:3]]
    ordinal = _WORDS[index % len(_WORDS)] + ("" if index < len(_WORDS) else str(index // len(_WORDS)))
    return "-".join([WORDS_PREFIX, *picked, ordinal])


def uuid(id_format: str, profile: str, node: str, index: int) -> str:
    """The device's UUID attribute."""
    return word_id("uuid", node, index) if id_format == WORDS else f"{profile}-{node}-{index}"


def serial(node: str, index: int) -> str:
    """The device's serial number (the `words` format publishes one; the reference format has none)."""
    return word_id("serial", node, index)


def interface_name(id_format: str, node: str, index: int) -> str:
    """Interface name of NIC `index`."""
    return word_id("interface", node, index) if id_format == WORDS else f"fake{index}"


def hardware_address(id_format: str, node: str, index: int) -> str:
    """The hardware address of NIC `index`: a locally administered MAC, stable per node and index (reference)."""
    if id_format == WORDS:
        return word_id("hardware", node, index)
    node_byte = sum(node.encode()) % 256
    return f"02:fa:00:00:{node_byte:02x}:{index:02x}"


def ip_cidr(id_format: str, index: int) -> str:
    """The documentation-range address NIC `index` reports (RFC 5737, RFC 3849), in canonical CIDR form."""
    if id_format == WORDS:
        return f"2001:db8:7a7::{10 + index:x}/64"
    return f"192.0.2.{10 + index}/24"
