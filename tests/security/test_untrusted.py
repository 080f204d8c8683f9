"""Reading a model folder never runs code from it: the chat template is rendered in Jinja2's
immutable sandbox, and ``auto_map`` / ``trust_remote_code`` / Python files are never imported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ctxbudget.counting import RequestCounter, count_request
from ctxbudget.counting.hf import render_template
from ctxbudget.errors import CtxbudgetError, InputError
from ctxbudget.messages.model import Message, Request

from .chatrun import run_cli

REQUEST = Request(system="Be brief.", messages=(Message(role="user", content="hello"),))
MESSAGES = [{"role": "user", "content": "hello"}]
BENIGN = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
# Python that leaves a marker file if anything ever imports it.
PAYLOAD = "import pathlib\npathlib.Path({marker!r}).write_text('imported')\n"

# The attempts the issue names: each is refused by the sandbox with a ctxbudget error.
REFUSED = [
    "{{ self._TemplateReference__context }}",
    "{{ self.__dict__ }}",
    "{{ messages|attr('__class__') }}",
    "{{ '{0.__class__}'.format(messages) }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ joiner().__call__.__globals__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ dict.__base__.__subclasses__() }}",
    "{{ messages.pop() }}",
    "{{ messages.append(1) }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
]
# Attempts the sandbox turns into an undefined value: they render nothing (no internals),
# though they raise no error (jinja2 renders an unsafe attribute as Undefined until used).
INERT = [
    # A namespace's attributes are its own keys: an unknown one is plain undefined (empty).
    "{% set x = namespace() %}{{ x.__dict__ }}",
]
# Attempts that would leave a marker file if they ran anything.
RUNS_CODE = [
    "{{ cycler.__init__.__globals__.os.popen('touch MARKER').read() }}",
    "{{ lipsum.__globals__['os'].system('touch MARKER') }}",
    "{{ self.__init__.__globals__.__builtins__.__import__('os').system('touch MARKER') }}",
    "{{ ''.__class__.__mro__[1].__subclasses__()[0].__init__.__globals__['sys']"
    ".modules['os'].system('touch MARKER') }}",
    "{{ (lipsum|attr('__globals__'))['os'].system('touch MARKER') }}",
    "{{ namespace.__init__.__globals__['os'].system('touch MARKER') }}",
    "{{ '{0.__init__.__globals__[os].system}'.format(cycler) }}",
]


def _tokenizer_json(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["hello there, be brief please"] * 20, trainer)
    tok.save(str(path))


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    _tokenizer_json(path)
    return path


def model_folder(root: Path, tokenizer_file: Path, template: str, marker: Path) -> Path:
    """A folder as the Hub serves a remote-code model, with Python that marks its import."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    auto_map = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    config = {
        "chat_template": template,
        "tokenizer_class": "EvilTokenizer",
        "auto_map": auto_map,
        "trust_remote_code": True,
        "eos_token": "<|im_end|>",
    }
    (root / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    model_config = {"auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}}
    (root / "config.json").write_text(json.dumps(model_config), encoding="utf-8")
    for name in ("tokenization_evil.py", "configuration_evil.py", "__init__.py", "evil.py"):
        (root / name).write_text(PAYLOAD.format(marker=str(marker)), encoding="utf-8")
    return root


@pytest.mark.parametrize("template", REFUSED)
def test_reaching_python_internals_is_a_one_line_input_error(template: str) -> None:
    with pytest.raises(InputError) as caught:
        render_template(template, MESSAGES)
    assert "refused by the sandbox" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("template", INERT)
def test_unsafe_attributes_render_as_nothing(template: str) -> None:
    assert render_template(template, MESSAGES) == ""


@pytest.mark.parametrize("template", RUNS_CODE)
def test_no_template_runs_code(
    template: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError):
        render_template(template, MESSAGES)
    assert not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("where", ["tokenizer_config.json", "chat_template.jinja"])
@pytest.mark.parametrize("template", REFUSED[:2] + RUNS_CODE[:2])
def test_a_hostile_template_in_a_model_folder_fails_cleanly(
    where: str, template: str, tmp_path: Path, tokenizer_file: Path
) -> None:
    marker = tmp_path / "imported"
    root = model_folder(tmp_path / "model", tokenizer_file, BENIGN, marker)
    if where == "chat_template.jinja":
        (root / where).write_text(template, encoding="utf-8")
    else:
        config = json.loads((root / where).read_text(encoding="utf-8"))
        (root / where).write_text(json.dumps(config | {"chat_template": template}), "utf-8")
    with pytest.raises(CtxbudgetError) as caught:
        count_request(REQUEST, f"hf:{root}")
    assert "\n" not in str(caught.value)
    assert not marker.exists()


def test_remote_code_in_a_model_folder_is_never_imported(
    tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "imported"
    root = model_folder(tmp_path / "model", tokenizer_file, BENIGN, marker)
    # The worst case: the folder is the working directory and on sys.path.
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    count = count_request(REQUEST, f"hf:{root}")
    assert count.total > 0 and count.kind == "exact"
    assert RequestCounter(f"hf:{root}").count(REQUEST).total == count.total
    new = set(sys.modules) - before
    assert not {"evil", "tokenization_evil", "configuration_evil", "transformers"} & new
    assert not marker.exists()


def test_the_cli_counts_a_hostile_folder_without_running_it(
    tmp_path: Path,
    tokenizer_file: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "imported"
    root = model_folder(tmp_path / "model", tokenizer_file, BENIGN, marker)
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"messages": MESSAGES}), encoding="utf-8")
    monkeypatch.chdir(root)
    run = run_cli(
        ["request", str(body), "--tokenizer", f"hf:{root}", "--json"], capsys, monkeypatch
    )
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["tokens"] > 0
    assert not marker.exists()


@pytest.mark.parametrize(
    "model",
    [
        {"type": "PythonTokenizer", "module": "evil", "class": "Evil"},
        {"type": "BPE", "vocab": {"a": 0}, "merges": [], "auto_map": "evil.Evil"},
    ],
)
def test_a_tokenizer_json_naming_python_code_is_not_run(
    model: dict[str, object], tmp_path: Path, tokenizer_file: Path
) -> None:
    marker = tmp_path / "imported"
    root = model_folder(tmp_path / "model", tokenizer_file, BENIGN, marker)
    data = json.loads((root / "tokenizer.json").read_text(encoding="utf-8"))
    data["model"] = model
    data["pre_tokenizer"] = {"type": "Custom", "module": "evil"}
    (root / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(CtxbudgetError) as caught:
        count_request(REQUEST, f"hf:{root}")
    assert "\n" not in str(caught.value)
    assert not marker.exists()
