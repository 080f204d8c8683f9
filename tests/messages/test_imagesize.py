"""Image sizes read from base64 headers agree with what Pillow wrote."""

from __future__ import annotations

import base64
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from ctxbudget.messages.imagesize import image_size, image_size_of_bytes, parse_data_url

# (format, mode, save options): VP8 lossy, VP8L lossless and VP8X (alpha) WebP chunks;
# baseline and progressive JPEG; JPEG with a 20 kB EXIF segment before the frame header.
_EXIF = Image.Exif()
_EXIF[0x010E] = "x" * 20_000
VARIANTS = [
    ("PNG", "RGB", {}),
    ("GIF", "P", {}),
    ("JPEG", "RGB", {}),
    ("JPEG", "RGB", {"progressive": True}),
    ("JPEG", "RGB", {"exif": _EXIF.tobytes()}),
    ("WEBP", "RGB", {}),
    ("WEBP", "RGB", {"lossless": True}),
    ("WEBP", "RGBA", {"exif": _EXIF.tobytes()}),
]


def _encoded(fmt: str, mode: str, options: dict[str, object], width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new(mode, (width, height)).save(buffer, fmt, **options)
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(("fmt", "mode", "options"), VARIANTS)
@settings(max_examples=15)
@given(width=st.integers(1, 2000), height=st.integers(1, 2000))
def test_size_matches_the_encoder(
    fmt: str, mode: str, options: dict[str, object], width: int, height: int
) -> None:
    assert image_size(_encoded(fmt, mode, options, width, height)) == (width, height)


@pytest.mark.parametrize("payload", ["", "!!!!", "aGVsbG8gd29ybGQ=", "/9j/" + "A" * 40])
def test_unknown_or_broken_data_has_no_size(payload: str) -> None:
    assert image_size(payload) is None


@given(st.text(max_size=200))
def test_any_text_gives_a_size_or_none(payload: str) -> None:
    size = image_size(payload)
    assert size is None or (size[0] > 0 and size[1] > 0)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("data:image/png;base64,AAAA", ("image/png", "AAAA")),
        ("data:image/jpeg;name=a.jpg;base64,QQ==", ("image/jpeg", "QQ==")),
        ("data:text/plain,hello", None),
        ("data:image/png;base64", None),
        ("https://example.com/a.png", None),
    ],
)
def test_parse_data_url(url: str, expected: tuple[str, str] | None) -> None:
    assert parse_data_url(url) == expected


HEADS = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    b"GIF89a",
    b"GIF87a",
    b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    b"RIFF\x00\x00\x00\x00WEBPVP8L",
    b"RIFF\x00\x00\x00\x00WEBPVP8X",
    b"\xff\xd8",
    b"\xff\xd8\xff\xc0",
)


@settings(max_examples=400)
@given(head=st.sampled_from(HEADS), tail=st.binary(max_size=40), cut=st.integers(0, 60))
def test_a_cut_or_garbled_header_has_no_size_and_no_error(
    head: bytes, tail: bytes, cut: int
) -> None:
    """A header cut short (a truncated upload) or followed by garbage: a size or None, from the
    bytes and from their base64 alike; never an exception (review: a PNG cut inside its IHDR
    raised struct.error through every adapter and the request command)."""
    data = (head + tail)[:cut]
    size = image_size_of_bytes(data)
    assert size == image_size(base64.b64encode(data).decode())
    assert size is None or (size[0] > 0 and size[1] > 0)
