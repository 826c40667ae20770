"""An unknown or bad key with a secret-looking name is named, and no word of the message is
redacted (issue #27 defect 11).

`profiles.p.api_key: unknown key` read as an assignment to redaction, which hid the
word after the colon: `api_key: [REDACTED:generic_secret] key`. Messages about keys now
name the key in quotes (`unknown key 'api_key' in profiles.p`), wherever the key is:
the pipeline file, a step, `[runjournal]`, a profiles file, the user config, `--set`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.inprocess import InProcess, one_error_line

VALUE = "hunter2-" + "not-a-real-value"


CASES = {
    "top-level": ({"top": f'api_key = "{VALUE}"'}, "unknown key 'api_key'"),
    "step": ({"step": f'token = "{VALUE}"'}, "unknown key 'token' in steps[0]"),
    "settings": ({"settings": f'password = "{VALUE}"'}, "unknown key 'password' in pipeline"),
    "profiles-file": (
        {"profiles": f'[profiles.p]\nprovider = "openai"\nmodel = "m"\napi_key = "{VALUE}"\n'},
        "unknown key 'api_key' in profiles.p",
    ),
    "profiles-empty": (
        {"profiles": '[profiles.p]\nprovider = "openai"\nmodel = "m"\napi_key_env = ""\n'},
        "key 'api_key_env' in profiles.p must be a non-empty string",
    ),
    "user-config": (
        {"user": f'[profiles.q]\nprovider = "openai"\nmodel = "m"\nclient_secret = "{VALUE}"\n'},
        "unknown key 'client_secret' in profiles.q",
    ),
    "set": ({"set": f"password={VALUE}"}, "--set 'password' is read by no step"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_secret_looking_key_is_named_and_nothing_is_redacted(
    invoke: InProcess, example: Path, tmp_path: Path, case: str
) -> None:
    given, words = CASES[case]
    if "top" in given:
        example.write_text(given["top"] + "\n" + example.read_text())
    if "step" in given:
        example.write_text(
            example.read_text().replace("[[steps]]\n", f"[[steps]]\n{given['step']}\n", 1)
        )
    if "settings" in given:
        example.write_text(example.read_text() + f"\n[runjournal]\n{given['settings']}\n")
    args = ["run", str(example), "--output-root", str(tmp_path / "out"), "--no-progress"]
    if "profiles" in given:
        (tmp_path / "profiles.toml").write_text(given["profiles"])
        args += ["--profiles-file", str(tmp_path / "profiles.toml")]
    if "user" in given:
        config = invoke.home / ".config" / "runjournal" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(given["user"])
    if "set" in given:
        args += ["--set", given["set"]]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    line = one_error_line(result.stderr)
    assert words in line, line
    assert "REDACTED" not in line and VALUE not in line, line
