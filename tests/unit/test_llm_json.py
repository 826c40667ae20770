"""The `llm.json` built-in: prompt template, JSON replies, failures named clearly."""

from __future__ import annotations

import pytest
from runjournal.adapters.builtin_modules import BUILTIN_MODULES
from runjournal.adapters.builtin_modules.llm_json import (
    ChunkAnswer,
    LLMJsonModule,
    LLMReplyError,
    parse_reply,
)
from runjournal.adapters.profiles import OFFLINE, OfflineRuntime
from runjournal.domain.modules import Chunk, ModuleContractError, StageContext


class FakeLLM:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[tuple[str, str | None]] = []

    def complete(self, prompt: str, *, system: str | None = None) -> str:
        self.prompts.append((prompt, system))
        return self.reply


CHUNK = Chunk(id="c" * 64, source="docs/a.md", start=0, end=5, text="Hello", sha256="s" * 64)


def ctx(llm, **params):
    return StageContext(step="ask", lane="docs/a.md", params=params, llm=llm)


def test_registered_as_a_builtin():
    assert BUILTIN_MODULES["llm.json"] is LLMJsonModule


def test_prompt_template_and_system_reach_the_runtime():
    llm = FakeLLM('{"topic": "greeting"}')
    answer = LLMJsonModule().extract(
        CHUNK, ctx(llm, prompt="{source} says: {text}", system="Be brief.")
    )
    assert answer == ChunkAnswer(source="docs/a.md", answer={"topic": "greeting"})
    assert llm.prompts == [("docs/a.md says: Hello", "Be brief.")]


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("```json\n[1, 2]\n```", [1, 2]),
        ("  42  ", 42),
        ('"text"', "text"),
    ],
)
def test_replies(reply, value):
    assert parse_reply(reply) == value


def test_a_non_json_reply_is_a_clear_error():
    with pytest.raises(LLMReplyError, match="not JSON"):
        LLMJsonModule().extract(CHUNK, ctx(FakeLLM("Sure! Here is the answer.")))


def test_a_bad_template_is_a_clear_error():
    with pytest.raises(LLMReplyError, match="template"):
        LLMJsonModule().extract(CHUNK, ctx(FakeLLM("1"), prompt="{nope}"))


def test_a_step_without_profile_fails_with_the_stub():
    with pytest.raises(ModuleContractError, match="no LLM profile"):
        LLMJsonModule().extract(CHUNK, StageContext(step="ask", lane="l"))


def test_offline_runtime_is_deterministic_json():
    llm = OfflineRuntime(OFFLINE)
    first = LLMJsonModule().extract(CHUNK, ctx(llm))
    assert first == LLMJsonModule().extract(CHUNK, ctx(llm))
    assert first.answer["model"] == OFFLINE.model


def test_normalize_warns_about_empty_answers():
    merged = [ChunkAnswer("a", {}), ChunkAnswer("a", {"x": 1})]
    result = LLMJsonModule().normalize(merged, ctx(FakeLLM("1")))
    assert result.value == merged and result.warnings == ["1 chunk(s) got an empty answer"]
