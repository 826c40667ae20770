"""Every spec form of the module loader, and every way a plugin can fail to load."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from runjournal.adapters.builtin_modules import BUILTIN_MODULES
from runjournal.adapters.module_loader import (
    ModuleLoadError,
    load_module,
    load_validator,
    plugin_module_name,
)
from runjournal.domain.modules import Chunk, Module, StageContext, Validator
from support.paths import EXAMPLE

GOOD = """
from __future__ import annotations

import msgspec

from runjournal.domain.modules import Module, Normalized


class Count(msgspec.Struct, frozen=True):
    words: int


class Words(Module):
    name = "test.words"
    fingerprint = "test.words/{version}"
    artifact_kind = "count"
    schema = "test.words/v1"
    chunk_type = Count
    merged_type = Count
    artifact_type = Count

    def extract(self, chunk, ctx):
        return Count(len(chunk.text.split()))

    def merge(self, parts, ctx):
        return Count(sum(p.words for p in parts))

    def normalize(self, merged, ctx):
        return Normalized(merged)
"""

VALIDATOR = """
from runjournal.domain.modules import Validator


class NonEmpty(Validator):
    name = "test.nonempty"
    fingerprint = "test.nonempty/1"

    def check(self, artifact, ctx):
        return [] if artifact else ["empty"]
"""


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def load_error(spec: str, pipeline_dir: Path, *, validator: bool = False) -> str:
    loader = load_validator if validator else load_module
    with pytest.raises(ModuleLoadError) as info:
        loader(spec, pipeline_dir=str(pipeline_dir))
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    kind = "validator" if validator else "module"
    assert message.startswith(f"cannot load {kind} {spec!r}: ")
    assert info.value.spec == spec
    return message


def run_words(module: Module, text: str) -> int:
    ctx = StageContext(step="w", lane="a.md")
    chunk = Chunk("c", "a.md", 0, len(text), text, "x")
    part = msgspec.json.decode(
        msgspec.json.encode(module.extract(chunk, ctx)), type=module.chunk_type
    )
    return module.normalize(module.merge([part], ctx), ctx).value.words


class TestSpecForms:
    @pytest.mark.parametrize("name", sorted(BUILTIN_MODULES))
    def test_builtin_names(self, name: str, tmp_path: Path) -> None:
        first = load_module(name, pipeline_dir=str(tmp_path))
        second = load_module(name, pipeline_dir=str(tmp_path))
        assert type(first) is BUILTIN_MODULES[name]
        assert first is not second

    def test_path_relative_to_the_pipeline_dir(self, tmp_path: Path) -> None:
        write(tmp_path / "plugins" / "words.py", GOOD.format(version=1))
        module = load_module("plugins/words.py:Words", pipeline_dir=str(tmp_path))
        assert type(module).fingerprint == "test.words/1"
        assert run_words(module, "one two three") == 3
        assert type(module).__module__ == plugin_module_name(tmp_path / "plugins" / "words.py")
        assert not (tmp_path / "plugins" / "__pycache__").exists()

    def test_a_bare_file_name_and_an_absolute_path(self, tmp_path: Path) -> None:
        path = write(tmp_path / "words.py", GOOD.format(version=1))
        by_name = load_module("words.py:Words", pipeline_dir=str(tmp_path))
        by_path = load_module(f"{path}:Words", pipeline_dir="/nonexistent")
        assert type(by_name) is type(by_path)

    def test_same_file_name_in_two_dirs_does_not_clash(self, tmp_path: Path) -> None:
        write(tmp_path / "a" / "words.py", GOOD.format(version=1))
        write(tmp_path / "b" / "words.py", GOOD.format(version=2))
        a = load_module("a/words.py:Words", pipeline_dir=str(tmp_path))
        b = load_module("b/words.py:Words", pipeline_dir=str(tmp_path))
        assert type(a).fingerprint == "test.words/1"
        assert type(b).fingerprint == "test.words/2"
        assert type(a).__module__ != type(b).__module__
        assert run_words(a, "x y") == run_words(b, "x y") == 2

    def test_reloading_reuses_the_module_until_the_file_changes(self, tmp_path: Path) -> None:
        path = write(tmp_path / "p" / "words.py", GOOD.format(version=1))
        first = load_module("p/words.py:Words", pipeline_dir=str(tmp_path))
        again = load_module("p/words.py:Words", pipeline_dir=str(tmp_path))
        assert type(first) is type(again) and first is not again
        write(path, GOOD.format(version=7))
        changed = load_module("p/words.py:Words", pipeline_dir=str(tmp_path))
        assert type(changed).fingerprint == "test.words/7"

    def test_module_name_is_stable_and_an_identifier(self, tmp_path: Path) -> None:
        name = plugin_module_name(tmp_path / "my-plugin.v2.py")
        assert name == plugin_module_name(tmp_path / "my-plugin.v2.py")
        assert name.isidentifier()
        assert name != plugin_module_name(tmp_path / "other" / "my-plugin.v2.py")

    def test_dotted_module_and_nested_attribute(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        write(tmp_path / "site" / "rjtest_pkg" / "__init__.py", "")
        write(
            tmp_path / "site" / "rjtest_pkg" / "mods.py",
            GOOD.format(version=3) + "\nclass Holder:\n    Inner = Words\n",
        )
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
        try:
            module = load_module("rjtest_pkg.mods:Words", pipeline_dir=str(tmp_path))
            nested = load_module("rjtest_pkg.mods:Holder.Inner", pipeline_dir=str(tmp_path))
            assert type(module) is type(nested)
            assert type(module).fingerprint == "test.words/3"
        finally:
            for name in ("rjtest_pkg", "rjtest_pkg.mods"):
                sys.modules.pop(name, None)

    def test_entry_point(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        site = tmp_path / "site"
        write(site / "rjtest_ep.py", GOOD.format(version=4) + VALIDATOR)
        dist = site / "rjtest_ep-0.1.dist-info"
        write(dist / "METADATA", "Metadata-Version: 2.1\nName: rjtest-ep\nVersion: 0.1\n")
        write(
            dist / "entry_points.txt",
            "[runjournal.modules]\nwords = rjtest_ep:Words\nbroken = rjtest_ep_missing:X\n\n"
            "[runjournal.validators]\nnonempty = rjtest_ep:NonEmpty\n",
        )
        monkeypatch.syspath_prepend(str(site))
        try:
            module = load_module("words", pipeline_dir=str(tmp_path))
            assert type(module).fingerprint == "test.words/4"
            validator = load_validator("nonempty", pipeline_dir=str(tmp_path))
            assert validator.check([], StageContext(step="s", lane="l")) == ["empty"]
            message = load_error("broken", tmp_path)
            assert "raised ModuleNotFoundError while loading entry point" in message
        finally:
            sys.modules.pop("rjtest_ep", None)

    def test_the_example_acronyms_plugin(self) -> None:
        module = load_module("plugins/acronyms.py:Acronyms", pipeline_dir=str(EXAMPLE))
        assert type(module).fingerprint == "example.acronyms/1"
        text = "Logs use a write-ahead log (WAL). The WAL is flushed. See also JSON.\n"
        ctx = StageContext(step="acronyms", lane="a.md")
        part = module.extract(Chunk("c", "a.md", 0, len(text), text, "x"), ctx)
        data = msgspec.json.encode(part, order="deterministic")
        part = msgspec.json.decode(data, type=module.chunk_type)
        merged = module.merge([part], ctx)
        artifact = module.normalize(merged, ctx).value
        encoded = msgspec.json.encode(artifact, order="deterministic")
        assert msgspec.json.decode(encoded, type=module.artifact_type) == artifact
        assert [(a.acronym, a.expansion, a.count) for a in artifact] == [
            ("WAL", "write-ahead log", 2)
        ]

    def test_printing_while_importing_goes_to_stderr(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        write(tmp_path / "loud.py", GOOD.format(version=1) + '\nprint("hello from import")\n')
        load_module("loud.py:Words", pipeline_dir=str(tmp_path))
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "hello from import" in captured.err

    def test_validator_by_path(self, tmp_path: Path) -> None:
        write(tmp_path / "checks.py", VALIDATOR)
        validator = load_validator("checks.py:NonEmpty", pipeline_dir=str(tmp_path))
        assert isinstance(validator, Validator)
        assert validator.check([1], StageContext(step="s", lane="l")) == []


MISSING_FINGERPRINT = GOOD.format(version=1).replace('fingerprint = "test.words/1"', "")
NO_EXTRACT = GOOD.format(version=1).replace("def extract(", "def extract_(")
BAD_CODEC = (
    GOOD.format(version=1)
    + "\nclass Bad(msgspec.Struct):\n    x: Undefined\n\nWords.artifact_type = Bad\n"
)


@pytest.mark.parametrize(
    ("files", "spec", "expected"),
    [
        ({}, "plugins/x.py:Terms", "file not found"),
        ({"plugins/x.py": ""}, "plugins/x.py:Terms", "has no attribute 'Terms'"),
        ({"plugins/x.py/.keep": ""}, "plugins/x.py:Terms", "not a regular file"),
        ({"x.py": "def broken(:\n    pass\n"}, "x.py:Terms", "syntax error at line 1: "),
        ({"x.py": "import rjtest_no_such_dependency\n"}, "x.py:T", "raised ModuleNotFoundError: "),
        (
            {"x.py": "raise ImportError('boom\\nsecond line')\n"},
            "x.py:T",
            "raised ImportError: boom second line",
        ),
        ({"x.py": "raise ValueError('bad config')\n"}, "x.py:T", "raised ValueError: bad config"),
        ({"x.py": "import sys\nsys.exit(3)\n"}, "x.py:T", "raised SystemExit: 3"),
        (
            {"x.py": "class Terms:\n    pass\n"},
            "x.py:Terms",
            "class 'Terms' is not a runjournal Module",
        ),
        (
            {"x.py": "Terms = 42\n"},
            "x.py:Terms",
            "an object of type 'int' is not a runjournal Module",
        ),
        ({"x.py": MISSING_FINGERPRINT}, "x.py:Words", "must declare `fingerprint`"),
        ({"x.py": NO_EXTRACT}, "x.py:Words", "must implement `extract`"),
        ({"x.py": BAD_CODEC}, "x.py:Words", "`artifact_type` is not a msgspec type: "),
        (
            {"x.py": GOOD.format(version=1) + "\nWords.__init__ = lambda self, n: None\n"},
            "x.py:Words",
            "raised TypeError while constructing it: ",
        ),
        (
            {
                "x.py": GOOD.format(version=1)
                + "\ndef _boom(self):\n    raise OSError('nope')\nWords.__init__ = _boom\n"
            },
            "x.py:Words",
            "raised OSError while constructing it: nope",
        ),
        ({}, "builtin.nope", "no built-in module has this name"),
        ({}, "rjtest_no_such_entry_point", "no installed package provides an entry point"),
        ({}, "rjtest_no_such_pkg.mod:Terms", "no module named 'rjtest_no_such_pkg'"),
        ({}, "json:JSONDecoder", "class 'JSONDecoder' is not a runjournal Module"),
        ({}, "json:Nope", "has no attribute 'Nope'"),
        ({}, "json:", "expected 'path/file.py:Class' or 'package.module:Class'"),
        ({}, "json.:X", "is not a dotted module name"),
        ({"x.py": ""}, "x.py:1bad", "is not a class name"),
        ({}, "", "the spec must be a non-empty string"),
        ({"plugins/x.py": ""}, "plugins/x.py", "a file needs a class name"),
    ],
)
def test_load_failures_are_one_line_module_load_errors(
    tmp_path: Path, files: dict[str, str], spec: str, expected: str
) -> None:
    for name, source in files.items():
        write(tmp_path / name, source)
    message = load_error(spec, tmp_path)
    assert expected in message


def test_a_failed_import_leaves_no_half_module_behind(tmp_path: Path) -> None:
    write(tmp_path / "flaky.py", "raise RuntimeError('first')\n")
    name = plugin_module_name(tmp_path / "flaky.py")
    load_error("flaky.py:Words", tmp_path)
    assert name not in sys.modules
    write(tmp_path / "flaky.py", GOOD.format(version=1))
    assert type(load_module("flaky.py:Words", pipeline_dir=str(tmp_path))).__module__ == name


def test_a_dependency_missing_inside_a_dotted_module_is_not_reported_as_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "site" / "rjtest_needs.py", "import rjtest_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    message = load_error("rjtest_needs:X", tmp_path)
    assert "raised ModuleNotFoundError: No module named 'rjtest_absent_dependency'" in message


def test_long_plugin_messages_are_bounded_and_escaped(tmp_path: Path) -> None:
    write(tmp_path / "x.py", "raise ValueError('\\x1b[31m' + 'y' * 5000)\n")
    message = load_error("x.py:T", tmp_path)
    assert "\x1b" not in message and "\\x1b" in message
    assert len(message) < 600


def test_keyboard_interrupt_is_not_swallowed(tmp_path: Path) -> None:
    write(tmp_path / "x.py", "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_module("x.py:T", pipeline_dir=str(tmp_path))


@pytest.mark.parametrize(
    ("source", "spec", "expected"),
    [
        (
            VALIDATOR.replace('fingerprint = "test.nonempty/1"', ""),
            "v.py:NonEmpty",
            "must declare `fingerprint`",
        ),
        (GOOD.format(version=1), "v.py:Words", "class 'Words' is not a runjournal Validator"),
        ("", "builtin.nonempty", "no built-in validator has this name"),
    ],
)
def test_validator_failures(tmp_path: Path, source: str, spec: str, expected: str) -> None:
    write(tmp_path / "v.py", source)
    assert expected in load_error(spec, tmp_path, validator=True)


# Built at run time (never a literal): a token a reviewer's scanner would flag.
PLANTED_TOKEN = "gh" + "p_" + "Q7" * 18


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("name", "test.words " + PLANTED_TOKEN),
        ("fingerprint", "test.words/" + PLANTED_TOKEN),
        ("artifact_kind", PLANTED_TOKEN),
        ("schema", "test.words/v1?key=" + PLANTED_TOKEN),
        ("media_type", "application/x-" + PLANTED_TOKEN),
    ],
)
def test_credential_shaped_module_declarations_are_refused(
    tmp_path: Path, attr: str, value: str
) -> None:
    source = GOOD.format(version=1) + f"\nWords.{attr} = {value!r}\n"
    write(tmp_path / "x.py", source)
    message = load_error("x.py:Words", tmp_path)
    assert f"declares a credential-shaped `{attr}`" in message
    assert PLANTED_TOKEN not in message and PLANTED_TOKEN[4:] not in message


@pytest.mark.parametrize("attr", ["name", "fingerprint"])
def test_credential_shaped_validator_declarations_are_refused(tmp_path: Path, attr: str) -> None:
    write(tmp_path / "v.py", VALIDATOR + f"\nNonEmpty.{attr} = {'v/' + PLANTED_TOKEN!r}\n")
    message = load_error("v.py:NonEmpty", tmp_path, validator=True)
    assert f"validator NonEmpty declares a credential-shaped `{attr}`" in message
    assert PLANTED_TOKEN[4:] not in message


def test_ordinary_declarations_are_not_credential_shaped(tmp_path: Path) -> None:
    source = GOOD.format(version=1) + '\nWords.media_type = "application/vnd.api+json"\n'
    write(tmp_path / "x.py", source)
    assert load_module("x.py:Words", pipeline_dir=str(tmp_path)).media_type.endswith("+json")


def test_plugin_import_output_and_long_errors_are_redacted(tmp_path: Path, capsys) -> None:
    token = "gh" + "p_" + "Q" * 36
    write(
        tmp_path / "plugins" / "noisy.py",
        f"print('importing with {token}')\nraise RuntimeError('x' * 380 + ' {token}')\n",
    )
    message = load_error("plugins/noisy.py:Noisy", tmp_path)
    captured = capsys.readouterr()
    assert token not in message and token[:12] not in message
    assert token not in captured.out + captured.err
    assert "[REDACTED" in captured.err
