"""Masking infrastructure metadata in a run's artifacts: IPs, MACs, interface names, serial-like device attributes.

`status.devices` carries interface names, IP addresses, MACs and device IDs, and the reports quote claims, events
and logs verbatim. At the end of a run every file under `reports/<run-id>/` is rewritten: IPv4 and IPv6
addresses and MACs by pattern, and every value the artifacts themselves hold under a sensitive key
(`interfaceName`, `hardwareAddress`, `ips`, and serial-like device attributes such as `uuid`) wherever it
appears. A value always becomes the same token (`ip-3f2a`), so records still correlate. `--dra-no-mask` leaves the
artifacts as they are.

This rewrite is the second net. The first is at the source (`dra_conformance.model.masking`): what a check records
or prints is masked by its position in the observed structure before it becomes text, with the same tokens. This
net cannot see a value quoted inside a sentence unless some JSON artifact also holds it under a sensitive key, nor
a value of a shape its patterns do not know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dra_conformance.model.masking import is_ip, mask_value, token

__all__ = ["Masker", "mask_run", "sensitive_values", "token"]

# Keys whose values are infrastructure metadata wherever a JSON artifact holds them.
SENSITIVE_KEYS = re.compile(r"^(interfaceName|hardwareAddress|ips|macAddress|ipAddress)$", re.IGNORECASE)
# Device attributes with serial-like values, masked where they appear as attributes ({"string": ...}); a bare
# string under "uuid" is an Allure result's own id, which names its files and must stay.
SERIAL_ATTRIBUTES = re.compile(r"^(uuid|serial\w*|deviceId|pciAddress)$", re.IGNORECASE)
MAC = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:])")
IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?:/\d{1,2})?(?![\d.])")
# Not preceded by a word character: "x.py::test" is a pytest id, not an address.
IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?:/\d{1,3})?(?![0-9A-Fa-f:])")
# Files the masker rewrites (text artifacts); anything else (screenshots, archives) is left alone.
TEXT_SUFFIXES = (".json", ".jsonl", ".xml", ".md", ".txt", ".log", ".properties", ".yaml", ".csv", ".html")
# A value shorter than this is not masked by value (it would match everywhere), only by pattern.
MIN_VALUE_LENGTH = 4


def sensitive_values(document: Any) -> set[str]:
    """Every string a JSON document holds under a sensitive key (lists and nested objects included)."""
    found: set[str] = set()

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            for item in value:
                yield from strings(item)
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                serial = SERIAL_ATTRIBUTES.match(str(key)) and isinstance(item, dict)
                if SENSITIVE_KEYS.match(str(key)) or serial:
                    found.update(s for s in strings(item) if len(s) >= MIN_VALUE_LENGTH)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and value[:1] in "{[":
            try:
                walk(json.loads(value))  # JSON kept as a string (JUnit properties, attachments)
            except ValueError:
                pass

    walk(document)
    return found


class Masker:
    """Masks known values and address patterns in text."""

    def __init__(self, values: set[str]) -> None:
        """Mask `values` (longest first, so a value inside another is not half-masked) and every address."""
        self.values = sorted(values, key=len, reverse=True)

    def mask(self, text: str) -> str:
        """`text` with every sensitive value replaced by its token."""
        for value in self.values:
            if value in text:
                text = text.replace(value, mask_value(value))
        text = MAC.sub(lambda m: token("mac", m.group(0).lower()), text)
        text = IPV4.sub(lambda m: token("ip", m.group(0)) if is_ip(m.group(0)) else m.group(0), text)
        return IPV6.sub(lambda m: token("ip", m.group(0)) if is_ip(m.group(0)) else m.group(0), text)


def _text_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)


def _documents(path: Path, text: str) -> Iterator[Any]:
    if path.suffix == ".json":
        try:
            yield json.loads(text)
        except ValueError:
            return
    elif path.suffix == ".jsonl":
        for line in text.splitlines():
            try:
                yield json.loads(line)
            except ValueError:
                continue
    else:
        # XML and other text may quote JSON (JUnit properties): take every {...} that parses.
        for match in re.finditer(r"\{[^<>]*\}", text):
            try:
                yield json.loads(match.group(0).replace("&quot;", '"'))
            except ValueError:
                continue


def mask_run(run_dir: Path) -> dict[str, int]:
    """Mask every text artifact under `run_dir` in place; how many values and files it changed."""
    files = _text_files(run_dir)
    texts = {path: path.read_text(errors="replace") for path in files}
    values: set[str] = set()
    for path, text in texts.items():
        for document in _documents(path, text):
            values |= sensitive_values(document)
    masker = Masker(values)
    changed = 0
    for path, text in texts.items():
        masked = masker.mask(text)
        if masked != text:
            path.write_text(masked)
            changed += 1
    return {"values": len(values), "files": changed}
