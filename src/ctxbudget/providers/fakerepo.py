"""A small fake repository for the scripted coding agent: files, test runs and edits as text.

Everything is generated from a seed, so every run of the mock sees the same outputs; sizes vary
from a one-line edit confirmation to a source file of about a thousand tokens, some in Chinese.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

MODULES: tuple[str, ...] = ("money", "dates", "report", "parser", "cache")
# Modules whose comments and docstrings are Chinese, as in the seed's mixed-language sessions.
CHINESE_MODULES = frozenset({"report", "parser"})

_VERBS = ("parse", "format", "round", "merge", "split", "total", "convert", "check", "load")
_NOUNS = ("amount", "entry", "period", "line", "account", "rate", "cell", "row", "key")
_EN_DOCS = (
    "Return the value rounded half-up to the given number of places.",
    "Split the line on commas, keeping quoted fields intact.",
    "Merge two periods that overlap; raise ValueError when they do not.",
    "Convert the amount into cents, rejecting values with more than two decimals.",
    "Look the key up in the cache and fall back to the loader on a miss.",
)
_ZH_DOCS = (
    "按四舍五入保留指定位数的小数，返回新的金额。",
    "把一行文本按逗号拆开，引号里的逗号不拆。",
    "合并两个重叠的账期；不重叠时抛出 ValueError。",
    "把金额换算成分，超过两位小数的输入直接拒绝。",
    "先查缓存，缓存未命中时再调用加载函数。",
)
_ZH_DESIGN = (
    "ledger 是一个记账小工具，负责读取流水、按账期汇总并生成报表。",
    "金额一律用整数“分”存储，避免浮点误差；对外接口接受字符串形式的金额。",
    "解析器只接受 UTF-8 编码的 CSV，遇到格式错误的行会记录行号并跳过。",
    "报表模块按账户和账期两级分组，输出 Markdown 表格，方便粘贴到周报里。",
    "缓存模块使用 LRU 策略，容量默认 256 项，命中率写入调试日志。",
    "所有公开函数都要有测试；修改金额相关代码时必须补充边界用例，比如 0.005 和负数。",
)


@dataclass(frozen=True, slots=True)
class Bug:
    """The planted bug of one task: the function, the wrong and the right value."""

    function: str
    got: int
    expected: int


def _rng(seed: int, *parts: object) -> random.Random:
    # A string seed is hashed with SHA-512 by random.Random: stable across runs and platforms.
    return random.Random(":".join(str(p) for p in (seed, *parts)))


def function_names(seed: int, module: str) -> list[str]:
    """The functions of ``module``, 3 to 12 of them."""
    rng = _rng(seed, "functions", module)
    names = {f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}" for _ in range(rng.randint(3, 12))}
    return sorted(names)


def source_file(seed: int, module: str) -> str:
    """The text of ``ledger/<module>.py``."""
    rng = _rng(seed, "source", module)
    docs = _ZH_DOCS if module in CHINESE_MODULES else _EN_DOCS
    lines = [f'"""ledger.{module}: {rng.choice(docs)}"""', "", "from __future__ import annotations"]
    for name in function_names(seed, module):
        arg = rng.choice(_NOUNS)
        lines += ["", "", f"def {name}({arg}: str, places: int = 2) -> int:"]
        lines.append(f'    """{rng.choice(docs)}"""')
        for i in range(rng.randint(2, 9)):
            lines.append(f"    step_{i} = len({arg}) * {rng.randint(2, 99)} // (places + {i + 1})")
        lines.append(f"    return step_{i} + {rng.randint(0, 9)}")
    return "\n".join(lines) + "\n"


def test_file(seed: int, module: str) -> str:
    """The text of ``tests/test_<module>.py``."""
    rng = _rng(seed, "tests", module)
    lines = [f"from ledger.{module} import *  # noqa: F403", ""]
    for name in function_names(seed, module):
        lines += ["", f"def test_{name}() -> None:"]
        lines.append(f'    assert {name}("{rng.randint(10, 999)}") == {rng.randint(10, 999)}')
    return "\n".join(lines) + "\n"


def design_doc(seed: int) -> str:
    """``docs/设计说明.md``: the design notes, in Chinese."""
    rng = _rng(seed, "design")
    paragraphs = [f"## {m}\n\n" + " ".join(rng.sample(_ZH_DESIGN, 3)) for m in MODULES]
    return "# 设计说明\n\n" + "\n\n".join(paragraphs) + "\n"


def file_list(seed: int) -> str:
    """``find . -name '*.py' -o -name '*.md'`` of the repository, with sizes."""
    rows = ["README.md  812", "docs/设计说明.md  " + str(len(design_doc(seed).encode()))]
    for m in MODULES:
        rows.append(f"ledger/{m}.py  {len(source_file(seed, m).encode())}")
        rows.append(f"tests/test_{m}.py  {len(test_file(seed, m).encode())}")
    return "\n".join(rows)


def read(seed: int, path: str) -> str:
    """The content of ``path``, or the error a file tool gives for a missing file."""
    if path.startswith("ledger/") and path.endswith(".py"):
        module = path.removeprefix("ledger/").removesuffix(".py")
        if module in MODULES:
            return source_file(seed, module)
    if path.startswith("tests/test_") and path.endswith(".py"):
        module = path.removeprefix("tests/test_").removesuffix(".py")
        if module in MODULES:
            return test_file(seed, module)
    if path == "docs/设计说明.md":
        return design_doc(seed)
    return f"error: {path}: No such file or directory"


def bug_for(seed: int, turn: int, module: str) -> Bug:
    """The planted bug of a fix task: an off-by-one in one function."""
    rng = _rng(seed, "bug", turn)
    expected = rng.randint(100, 999)
    return Bug(rng.choice(function_names(seed, module)), expected - 1, expected)


def failing_run(seed: int, turn: int, module: str, *, chinese_error: bool = False) -> str:
    """A pytest run with one failure; the AssertionError line is the exact one to keep."""
    bug = bug_for(seed, turn, module)
    names = function_names(seed, module)
    rng = _rng(seed, "run", turn)
    dots = "".join("F" if n == bug.function else "." for n in names)
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.12.3, pytest-8.3.2, pluggy-1.5.0",
        f"collected {len(names)} items",
        "",
        f"tests/test_{module}.py {dots}",
        "",
        "=================================== FAILURES ===================================",
        f"_{'_' * 20} test_{bug.function} {'_' * 20}",
        "",
        f"    def test_{bug.function}() -> None:",
        f'>       assert {bug.function}("{rng.randint(10, 999)}") == {bug.expected}',
        f"E       AssertionError: assert {bug.got} == {bug.expected}",
        f"E        +  where {bug.got} = {bug.function}('{rng.randint(10, 999)}')",
    ]
    if chinese_error:
        lines += ["", "During handling of the above exception, another exception occurred:"]
        lines += [f"E       ValueError: 金额格式错误：'{rng.randint(1, 99)},{rng.randint(1, 9)}'"]
    lines += [
        "",
        f"tests/test_{module}.py:{3 * names.index(bug.function) + 4}: AssertionError",
        "=========================== short test summary info ============================",
        f"FAILED tests/test_{module}.py::test_{bug.function} - AssertionError: "
        f"assert {bug.got} == {bug.expected}",
        f"========================= 1 failed, {len(names) - 1} passed in 0.{rng.randint(10, 99)}s"
        " =========================",
    ]
    return "\n".join(lines)


def passing_run(seed: int, turn: int, module: str) -> str:
    """The same test file after the fix: everything passes."""
    n = len(function_names(seed, module))
    rng = _rng(seed, "pass", turn)
    return (
        f"collected {n} items\n\ntests/test_{module}.py {'.' * n}\n\n"
        f"============================== {n} passed in 0.{rng.randint(10, 99)}s"
        " =============================="
    )


def grep(seed: int, pattern: str, path: str) -> str:
    """``grep -n PATTERN PATH`` over the generated file."""
    text = read(seed, path)
    hits = [f"{path}:{i}:{line}" for i, line in enumerate(text.splitlines(), 1) if pattern in line]
    return "\n".join(hits) if hits else f"(no match for {pattern!r} in {path})"
