"""An image reaches the count the same way through every adapter as in a request body: a data
URL's (or the bytes') pixel size and OpenAI's ``detail`` decide its tokens. The adapters once
kept the URL alone, so every image got the fixed unknown-size estimate, and an OpenAI-form
``image_url`` given as a plain string crashed the LangChain adapter."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, convert_to_openai_messages
from pydantic_ai import messages as pm

from ctxbudget.counting import count_request
from ctxbudget.integrations._responses import read_item
from ctxbudget.integrations.langchain import _read as read_langchain
from ctxbudget.integrations.pydantic_ai import _read as read_pydantic
from ctxbudget.messages.imagesize import image_size, image_size_of_bytes
from ctxbudget.messages.model import ImagePart, Message, Request
from ctxbudget.messages.openai import request_from_openai


def png(width: int, height: int) -> bytes:
    """The header of a PNG of that size: all the size reader looks at."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + crc


def jpeg(width: int, height: int) -> bytes:
    """SOI, an APP0 segment, then a baseline frame header (SOF0) with the size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0


IMAGES = {"png": (png(1024, 768), "image/png"), "jpeg": (jpeg(1920, 1080), "image/jpeg")}


def data_url(name: str) -> str:
    data, mime = IMAGES[name]
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def from_body(url: str, detail: str | None = None) -> ImagePart:
    """The image part the request-body reader makes of the same image (the reference)."""
    spec: dict[str, Any] = {"url": url} | ({"detail": detail} if detail else {})
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": spec}]}]}
    (message,) = request_from_openai(body).messages
    assert not isinstance(message.content, str)
    (part,) = message.images
    return part


def only_image(messages: tuple[Message, ...] | list[Message]) -> ImagePart:
    (message,) = messages
    (part,) = message.images
    return part


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_bytes_and_their_base64_give_one_size(name: str) -> None:
    data, _ = IMAGES[name]
    assert image_size_of_bytes(data) == image_size(base64.b64encode(data).decode())
    assert image_size_of_bytes(data) in ((1024, 768), (1920, 1080))


@pytest.mark.parametrize("name", sorted(IMAGES))
@pytest.mark.parametrize("detail", [None, "low", "high"])
def test_langchain_reads_an_image_as_its_own_openai_conversion_does(
    name: str, detail: str | None
) -> None:
    """LangChain's ``convert_to_openai_messages`` is the oracle, for each block form."""
    url = data_url(name)
    data, mime = IMAGES[name]
    b64 = base64.b64encode(data).decode()
    spec: dict[str, Any] = {"url": url} | ({"detail": detail} if detail else {})
    blocks: list[dict[str, Any]] = [{"type": "image_url", "image_url": spec}]
    if detail is None:  # the forms without a detail
        blocks += [
            {"type": "image_url", "image_url": url},
            {"type": "image", "url": url},
            {"type": "image", "base64": b64, "mime_type": mime},
            {"type": "image", "source_type": "base64", "data": b64, "mime_type": mime},
        ]
    for block in blocks:
        message = HumanMessage(content=[block])
        ours = only_image(read_langchain(message))
        theirs = only_image(
            request_from_openai({"messages": convert_to_openai_messages([message])}).messages
        )
        assert (ours.width, ours.height, ours.detail) == (
            theirs.width,
            theirs.height,
            theirs.detail,
        )
        assert ours == from_body(url, detail), block


@pytest.mark.parametrize("name", sorted(IMAGES))
@pytest.mark.parametrize("detail", [None, "low", "high"])
def test_responses_input_image_reads_as_the_chat_completions_image(
    name: str, detail: str | None
) -> None:
    """OpenAI Agents SDK items (Responses ``input_image``) against the same image sent to Chat
    Completions."""
    url = data_url(name)
    item: dict[str, Any] = {"type": "input_image", "image_url": url} | (
        {"detail": detail} if detail else {}
    )
    part = only_image(read_item({"role": "user", "content": [item]}))
    assert part == from_body(url, detail)


@pytest.mark.parametrize("name", sorted(IMAGES))
@pytest.mark.parametrize("detail", [None, "low", "high"])
def test_pydantic_ai_reads_image_urls_and_bytes_with_their_size(
    name: str, detail: str | None
) -> None:
    data, mime = IMAGES[name]
    metadata = {"detail": detail} if detail else None
    reference = from_body(data_url(name), detail)
    for content in (
        pm.ImageUrl(url=data_url(name), vendor_metadata=metadata),
        pm.BinaryContent(data=data, media_type=mime, vendor_metadata=metadata),
    ):
        request = pm.ModelRequest(parts=[pm.UserPromptPart(content=[content])])
        part = only_image(read_pydantic(request, None))
        assert (part.width, part.height, part.detail) == (
            reference.width,
            reference.height,
            reference.detail,
        )


@pytest.mark.parametrize("counter", ["o200k_base", "qwen3", "ctxbudget"])
def test_an_adapted_image_costs_what_the_same_image_in_a_body_costs(counter: str) -> None:
    """The end of it: the count, not only the part, for a size far from the unknown-size
    estimate (a 1920x1080 JPEG)."""
    url = data_url("jpeg")
    adapted = read_langchain(HumanMessage(content=[{"type": "image", "url": url}]))
    body = Request(messages=(Message(role="user", content=(from_body(url),)),))
    unknown = Request(messages=(Message(role="user", content=(ImagePart(url=url[:5]),)),))
    got = count_request(Request(messages=tuple(adapted)), counter).total
    assert got == count_request(body, counter).total
    assert got != count_request(unknown, counter).total
