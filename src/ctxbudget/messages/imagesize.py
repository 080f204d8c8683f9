"""Pixel size of an image (PNG, JPEG, GIF, WebP), base64 or bytes, read from its header alone."""

from __future__ import annotations

import base64
import binascii
import struct

# 1 MiB of base64: JPEG frame headers come after EXIF/ICC segments (each at most 64 KiB), so
# this bound finds them in practice while keeping a huge inline image cheap to look at.
_JPEG_SCAN_CHARS = 1 << 20
# Start-of-frame markers that carry the size (ITU T.81 table B.1); C4, C8 and CC are not frames.
_JPEG_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE})
_JPEG_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xDA)})


def parse_data_url(url: str) -> tuple[str, str] | None:
    """``(media_type, base64_payload)`` of a ``data:...;base64,`` URL, else None."""
    if not url.startswith("data:"):
        return None
    header, sep, payload = url[5:].partition(",")
    params = header.split(";")
    if not sep or "base64" not in params[1:]:
        return None
    return params[0], payload


def image_size(b64: str) -> tuple[int, int] | None:
    """``(width, height)`` of the base64 image, or None when the format or data is not known."""
    head = _decode(b64[:64])
    if head is None:
        return None
    if head[:2] == b"\xff\xd8":
        data = _decode(b64[:_JPEG_SCAN_CHARS])
        return None if data is None else _jpeg_size(data)
    return _header_size(head)


def image_size_of_bytes(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` of the image in ``data``, as ``image_size`` reads its base64."""
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data[: _JPEG_SCAN_CHARS // 4 * 3])
    return _header_size(data[:48])


def _header_size(head: bytes) -> tuple[int, int] | None:
    """The size in the first 48 bytes of a PNG, GIF or WebP image."""
    if len(head) >= 24 and head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
        return _positive(*struct.unpack(">II", head[16:24]))
    if len(head) >= 10 and head[:6] in (b"GIF87a", b"GIF89a"):
        return _positive(*struct.unpack("<HH", head[6:10]))
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp_size(head)
    return None


def _decode(b64: str) -> bytes | None:
    b64 = b64.strip()
    b64 = b64[: len(b64) - len(b64) % 4]
    try:
        return base64.b64decode(b64)
    except (binascii.Error, ValueError):
        return None


def _positive(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(head: bytes) -> tuple[int, int] | None:
    # Chunk layouts: WebP container spec, developers.google.com/speed/webp/docs/riff_container
    chunk = head[12:16]
    if len(head) < 30:
        return None
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return _positive(width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L" and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return _positive(1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF))
    if chunk == b"VP8X":
        width = 1 + int.from_bytes(head[24:27], "little")
        height = 1 + int.from_bytes(head[27:30], "little")
        return _positive(width, height)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte before a marker
            i += 1
            continue
        if marker in _JPEG_NO_LENGTH:
            i += 2
            continue
        if marker in _JPEG_SOF and i + 9 <= len(data):
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return _positive(width, height)
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None
