"""Assemble the real-text calibration corpus for the estimators from what is on this machine.

Kinds: english, chinese (Simplified), chinese_traditional, japanese, korean, python, json, mixed
(fitted), markdown (held out: shipped and tested, not fitted), plus russian (fitted lightly, no
band, not shipped).
Every text is real and taken deterministically (sorted paths, fixed strides), never written here:

- english  : CPython's reference documentation (``pydoc_data/topics.py``, ships with every Python)
             and the license texts in ``/usr/share/common-licenses`` (Debian ``base-files``), as
             wrapped and with each paragraph unwrapped onto one line (as model replies write).
- chinese  : ``msgstr`` strings of the zh_CN gettext catalogues in
             ``/usr/share/locale/zh_CN/LC_MESSAGES/*.mo`` and CPython's
             ``test/cjkencodings/gb2312-utf8.txt`` prose.
- chinese_traditional : the same from the zh_TW catalogues and ``big5-utf8.txt``.
- japanese : the same from the ja catalogues and ``test/cjkencodings/euc_jp-utf8.txt``.
- korean   : the same from the ko catalogues and ``test/cjkencodings/euc_kr-utf8.txt``.
- python   : CPython standard-library modules (a fixed list).
- json     : ``/usr/share/iso-codes/json/*.json`` and the ``*.json`` files of site-packages, as
             shipped (pretty-printed) and re-serialised compactly with ``json.dumps`` (what an
             agent sends as tool arguments).
- markdown : Markdown documentation shipped on this machine: ``*.md`` / ``*.md.gz`` under
             ``/usr/share/doc`` (Debian packages) and ``*.md`` in site-packages packages, without
             changelogs, news, licences and author lists, duplicate files once; one group per
             package, each read from the middle of its text (code blocks, lists, tables, not
             only titles and badges).
- mixed    : what a Chinese developer's session looks like: the English ``msgid`` and Chinese
             ``msgstr`` of zh_CN messages that hold format specifiers or options (``%s``, ``--x``),
             interleaved with consecutive lines of the stdlib modules above.

``python scripts/corpus.py --write tests/data/estimators`` rewrites the small sampled copy the
tests use (so they do not depend on the machine); ``--stats`` prints what was found.
"""

from __future__ import annotations

import argparse
import gettext
import gzip
import json
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
KINDS = (
    "english",
    "chinese",
    "chinese_traditional",
    "japanese",
    "korean",
    "python",
    "json",
    "mixed",
)
# Shipped and held to the same bands by the tests, but not fitted: with the shipped feature set,
# fitting it pushed English and JSON out of their bands (bench/estimators.md).
HELD_OUT_KINDS = ("markdown",)
SHIPPED_KINDS = (*KINDS, *HELD_OUT_KINDS)
"""The kinds in tests/data/estimators, in the order the tests and bench/estimators.py report."""
EXTRA_KINDS = ("russian",)
LOCALE_DIR = Path("/usr/share/locale")
LICENSE_DIR = Path("/usr/share/common-licenses")
ISO_JSON_DIR = Path("/usr/share/iso-codes/json")
DOC_DIR = Path("/usr/share/doc")
# Not documentation prose: release notes are commit lists, the others legal or name lists.
MD_SKIP = ("CHANGELOG", "NEWS", "LICENSE", "LICENCE", "AUTHORS", "COPYING")
STDLIB = Path(sysconfig.get_paths()["stdlib"])
SITE = Path(sysconfig.get_paths()["purelib"])
PY_MODULES = (
    "argparse.py", "ast.py", "calendar.py", "csv.py", "dataclasses.py", "difflib.py",
    "enum.py", "functools.py", "gettext.py", "heapq.py", "json/decoder.py", "json/encoder.py",
    "logging/__init__.py", "pathlib.py", "shutil.py", "string.py", "subprocess.py",
    "textwrap.py", "tokenize.py", "typing.py",
)  # fmt: skip
LICENSES = ("Apache-2.0", "GPL-3", "LGPL-2.1", "MPL-2.0", "Artistic", "BSD", "CC0-1.0")
CHUNK_CHARS = 3000  # the unit of sampling and of per-chunk evaluation


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """Split ``text`` into pieces of about ``size`` characters at line ends."""
    out: list[str] = []
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        out.append(text[start:end])
        start = end
    return out


def _catalog_messages(langs: tuple[str, ...]) -> Iterator[tuple[str, str, str]]:
    """(domain, msgid, msgstr) of every translated message, domains sorted, messages sorted."""
    for lang in langs:
        for mo in sorted((LOCALE_DIR / lang / "LC_MESSAGES").glob("*.mo")):
            if mo.is_symlink():
                continue
            try:
                with mo.open("rb") as handle:
                    catalog = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]
            except (OSError, UnicodeDecodeError, gettext.struct.error):  # type: ignore[attr-defined]
                continue
            for key in sorted(catalog, key=repr):
                msgid = key[0] if isinstance(key, tuple) else key
                value = catalog[key]
                if msgid and isinstance(value, str) and value.strip():
                    yield mo.stem, msgid, value


def _round_robin(groups: list[list[str]], limit: int) -> str:
    """Take one chunk from each group in turn (evenly strided) until ``limit`` characters."""
    picked: list[str] = []
    total = 0
    index = 0
    while total < limit and any(index < len(g) for g in groups):
        for group in groups:
            if index < len(group) and total < limit:
                picked.append(group[index])
                total += len(group[index])
        index += 1
    return "".join(picked)


def _strided(items: list[T], stride: int) -> list[T]:
    return items[::stride] if len(items) > stride else items


def _translations(langs: tuple[str, ...], extra: tuple[str, ...], limit: int) -> str:
    by_domain: dict[str, list[str]] = {}
    for domain, _msgid, msgstr in _catalog_messages(langs):
        by_domain.setdefault(domain, []).append(msgstr.strip() + "\n")
    groups = [chunks("".join(_strided(v, 3)), 600) for _, v in sorted(by_domain.items())]
    prose = [chunks(_read(STDLIB / "test" / "cjkencodings" / name), 600) for name in extra]
    return _round_robin([g for g in prose + groups if g], limit)


def unwrap(text: str) -> str:
    """Each paragraph on one line: a line break between two non-blank lines becomes a space."""
    lines = text.splitlines()
    out: list[str] = []
    for line in lines:
        if out and out[-1].strip() and line.strip() and not line.startswith((" ", "\t")):
            out[-1] = f"{out[-1].rstrip()} {line.strip()}"
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def english(limit: int) -> str:
    topics: list[str] = []
    try:
        from pydoc_data.topics import topics as table

        topics = [table[k] for k in sorted(table)]
    except ImportError:
        pass
    texts = ["\n".join(topics), *(_read(LICENSE_DIR / name) for name in LICENSES)]
    groups = [chunks(t) for t in texts]
    # the unwrapped copies start halfway through, so the two forms hold different passages
    for text in texts:
        pieces = chunks(unwrap(text))
        groups.append(pieces[len(pieces) // 2 :])
    return _round_robin([g for g in groups if g], limit)


def python_source(limit: int) -> str:
    groups = [chunks(_read(STDLIB / name)) for name in PY_MODULES]
    return _round_robin([_strided(g, 2) for g in groups if g], limit)


def _json_files() -> list[Path]:
    files = sorted(p for p in ISO_JSON_DIR.glob("*.json") if not p.name.startswith("schema"))
    files += sorted(p for p in SITE.rglob("*.json") if p.stat().st_size < 2_000_000)
    return files


def json_text(limit: int) -> str:
    groups: list[list[str]] = []
    for path in _json_files():
        raw = _read(path)
        try:
            compact = json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))
        except ValueError:
            continue
        groups.append(_strided(chunks(raw), 7))
        # compact JSON has no newlines: cut it into fixed pieces instead
        pieces = [compact[i : i + CHUNK_CHARS] for i in range(0, len(compact), CHUNK_CHARS)]
        groups.append(_strided(pieces, 7))
    return _round_robin([g for g in groups if g], limit)


def mixed(limit: int) -> str:
    code_lines: list[str] = []
    for name in PY_MODULES:
        code_lines += _read(STDLIB / name).splitlines(keepends=True)
    messages = [
        (msgid, msgstr)
        for _d, msgid, msgstr in _catalog_messages(("zh_CN",))
        if ("%" in msgid or "--" in msgid) and len(msgid) < 400
    ]
    messages = _strided(messages, 5)
    out: list[str] = []
    total = 0
    for i in range(0, len(messages), 4):
        block = "".join(f"{a.strip()}\n{b.strip()}\n" for a, b in messages[i : i + 4])
        start = (i * 37) % max(1, len(code_lines) - 12)
        block += "".join(code_lines[start : start + 8])
        out.append(block)
        total += len(block)
        if total >= limit:
            break
    return "".join(out)


def _markdown_files() -> dict[str, list[Path]]:
    """Markdown files by package (the folder under /usr/share/doc or site-packages), sorted."""
    found = [(DOC_DIR, p) for p in DOC_DIR.rglob("*.md*")] + [(SITE, p) for p in SITE.rglob("*.md")]
    by_package: dict[str, list[Path]] = {}
    for root, path in sorted(found):
        parts = path.relative_to(root).parts
        upper = path.name.upper()
        if (
            not path.name.endswith((".md", ".md.gz"))
            or path.is_symlink()
            or not path.is_file()
            or upper.startswith(MD_SKIP)
            or "changelogs" in parts
            or parts[0].endswith(".dist-info")
        ):
            continue
        by_package.setdefault(f"{root.name}/{parts[0]}", []).append(path)
    return by_package


def _read_md(path: Path) -> str:
    if path.name.endswith(".gz"):
        try:
            return gzip.decompress(path.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return ""
    return _read(path)


def markdown(limit: int) -> str:
    texts: dict[str, list[str]] = {}
    seen: set[str] = set()  # several packages ship the same README (libxmlsec1-*, libjpeg*)
    for package, paths in sorted(_markdown_files().items()):
        for text in filter(None, (_read_md(p).strip() for p in paths)):
            if text not in seen:
                seen.add(text)
                texts.setdefault(package, []).append(text + "\n\n")
    size = max(400, limit // max(1, len(texts)))  # every package gets a piece
    groups: list[list[str]] = []
    for _package, parts in sorted(texts.items()):
        pieces = chunks("".join(parts), size)
        middle = len(pieces) // 2  # start inside the text: past the title and badges
        groups.append(pieces[middle:] + pieces[:middle])
    return _round_robin([g for g in groups if g], limit)


def build(kind: str, limit: int) -> str:
    """The corpus text of one kind, at most about ``limit`` characters."""
    builders = {
        "english": english,
        "chinese": lambda n: _translations(("zh_CN",), ("gb2312-utf8.txt",), n),
        "chinese_traditional": lambda n: _translations(("zh_TW",), ("big5-utf8.txt",), n),
        "japanese": lambda n: _translations(("ja",), ("euc_jp-utf8.txt",), n),
        "korean": lambda n: _translations(("ko",), ("euc_kr-utf8.txt",), n),
        "russian": lambda n: _translations(("ru",), (), n),
        "python": python_source,
        "json": json_text,
        "mixed": mixed,
        "markdown": markdown,
    }  # fmt: skip
    return builders[kind](limit)


def load_shipped(directory: Path) -> dict[str, str]:
    """The sampled corpus written by ``--write`` (what the tests read)."""
    return {
        kind: (directory / f"{kind}.txt").read_text(encoding="utf-8")
        for kind in (*SHIPPED_KINDS, *EXTRA_KINDS)
        if (directory / f"{kind}.txt").exists()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the sampled corpus into this folder")
    parser.add_argument("--chars", type=int, default=24_000, help="characters per kind")
    parser.add_argument("--stats", action="store_true", help="print sizes per kind")
    args = parser.parse_args(argv)
    for kind in (*SHIPPED_KINDS, *EXTRA_KINDS):
        text = build(kind, args.chars)
        if args.stats or not args.write:
            print(f"{kind:9} {len(text):8} chars {len(text.encode()):8} bytes")
        if args.write and kind not in EXTRA_KINDS:
            args.write.mkdir(parents=True, exist_ok=True)
            (args.write / f"{kind}.txt").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
