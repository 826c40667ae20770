"""LLM profiles: the built-in `offline` profile and profiles files (docs/configuration.md).

A profile's identity is its non-secret fields; its source identity is where it was
defined (builtin | file | user-config) plus the non-secret content of its table,
never an absolute path. API keys are read from the environment only when called.
How the endpoint is called (timeouts, retries, rate limits, prices, a replay cassette)
is not identity: it does not change what the model answers.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
import urllib.parse
from collections.abc import Mapping
from typing import Any

import msgspec
from runjournal.adapters.llm.client_options import (
    CLIENT_KEYS,
    ClientOptions,
    OptionError,
    StructuredOutput,
    parse_client_options,
)
from runjournal.adapters.llm.reply_formats import offline_answer
from runjournal.adapters.secrets import remember_secrets, url_secrets
from runjournal.domain.identity import profile_digest, profile_source_digest
from runjournal.domain.llm import CallOptions
from runjournal.domain.redaction import is_secret_key

_PROFILE_KEYS = {"provider", "model", "base_url", "api_key_env", "params", "replay", *CLIENT_KEYS}
# Providers with a runtime here; `provider/model` strings name one of them.
PROVIDERS = ("offline", "openai", "anthropic")
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
ANTHROPIC_API_KEY_ENV = "ANTHROPIC_API_KEY"


class ProfileError(Exception):
    """`<key>: <message>`; or, for a `named` key, the message alone: it names the key in
    quotes, so a key such as `api_key` never reads as an assignment whose value
    redaction would hide (docs/operations.md "Redaction")."""

    def __init__(self, key: str, message: str, *, named: bool = False) -> None:
        super().__init__(message if named else f"{key}: {message}")
        self.key = key


class Profile(msgspec.Struct, frozen=True):
    id: str
    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    source_kind: str = "builtin"
    client: ClientOptions = msgspec.field(default_factory=ClientOptions)
    replay: str | None = None  # absolute path of a cassette that answers instead

    def key_env(self) -> str | None:
        """The variable that holds this profile's API key (None: it needs none)."""
        if self.api_key_env:
            return self.api_key_env
        if self.provider == "anthropic":
            return ANTHROPIC_API_KEY_ENV
        return DEFAULT_API_KEY_ENV if self.provider == "openai" else None

    def secrets(self, environ: Mapping[str, str]) -> list[str]:
        """The secrets this profile gives the process: its key and its URL credentials."""
        env = self.key_env()
        key = environ.get(env) if env else None
        return ([key] if key else []) + url_secrets(self.base_url)

    def non_secret(self) -> dict[str, Any]:
        params = {k: v for k, v in self.params.items() if not is_secret_key(k)}
        out: dict[str, Any] = {
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "params": params,
        }
        # Only a non-default output format is part of identity, so profiles written
        # before it existed keep their digests.
        if self.client.structured_output is not StructuredOutput.JSON_SCHEMA:
            out["structured_output"] = self.client.structured_output.value
        return out

    @property
    def digest(self) -> str:
        """profile component: the observed non-secret fields."""
        return profile_digest(self.non_secret())

    @property
    def source_digest(self) -> str:
        """profile_source component: origin kind and the table's non-secret content."""
        table = {**self.non_secret(), "api_key_env": self.api_key_env}
        return profile_source_digest(self.source_kind, table)


OFFLINE = Profile(id="offline", provider="offline", model="echo-1", source_kind="builtin")


class ProfileRegistry:
    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self._profiles = dict(profiles)

    def remember_secrets(self, environ: Mapping[str, str]) -> None:
        """Register every profile's key and URL credentials with the redactor
        (docs/internals.md "Known secrets")."""
        remember_secrets(v for p in self._profiles.values() for v in p.secrets(environ))

    def ids(self) -> list[str]:
        """Every profile id this registry knows, sorted."""
        return sorted(self._profiles)

    def get(self, profile_id: str) -> Profile:
        try:
            return self._profiles[profile_id]
        except KeyError:
            pass
        adhoc = _provider_model(profile_id)
        if adhoc is not None and adhoc[0] != "offline":
            # `openai/gpt-4o-mini`: the provider's defaults for that model.
            return Profile(id=profile_id, provider=adhoc[0], model=adhoc[1])
        known = ", ".join(sorted(self._profiles)) or "none"
        raise ProfileError(
            "profile",
            f"unknown profile '{profile_id}' (known: {known}; or write provider/model, "
            f"e.g. openai/gpt-4o-mini)",
        )

    @classmethod
    def load(
        cls, path: str | None, *, user_profiles: Mapping[str, Any] | None = None
    ) -> ProfileRegistry:
        """The built-in `offline`, then user-config profiles, then the profiles file's.

        Each profile remembers where it was defined (its source kind), which is part of
        the profile_source component: moving a profile between origins is a cold miss.
        """
        profiles: dict[str, Profile] = {"offline": OFFLINE}
        if user_profiles:
            profiles.update(_parse_profiles(user_profiles, "user-config", "profiles"))
        if path is None:
            return cls(profiles)
        try:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
        except OSError as exc:
            raise ProfileError(
                "profiles_file", f"cannot read profiles file: {exc.strerror}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ProfileError("profiles_file", f"not valid TOML ({exc})") from None
        if set(doc) - {"profiles"}:
            raise ProfileError("profiles_file", "expected only [profiles.<id>] tables")
        base = os.path.dirname(os.path.abspath(path))
        profiles.update(_parse_profiles(doc.get("profiles", {}), "file", "profiles", base))
        return cls(profiles)


def _provider_model(text: str) -> tuple[str, str] | None:
    """`openai/gpt-4o-mini` -> ("openai", "gpt-4o-mini") for a provider with a runtime."""
    provider, sep, model = text.partition("/")
    if sep and provider in PROVIDERS and model.strip():
        return provider, model
    return None


def _parse_profiles(
    table: Any, source_kind: str, prefix: str, base_dir: str | None = None
) -> dict[str, Profile]:
    if not isinstance(table, dict):
        raise ProfileError(prefix, "expected [profiles.<id>] tables")
    out: dict[str, Profile] = {}
    for pid, raw in table.items():
        where = f"{prefix}.{pid}"
        if not isinstance(raw, dict):
            raise ProfileError(where, "must be a table")
        unknown = set(raw) - _PROFILE_KEYS
        if unknown:
            name = sorted(unknown)[0]
            raise ProfileError(f"{where}.{name}", f"unknown key {name!r} in {where}", named=True)
        provider, model = raw.get("provider"), raw.get("model")
        if provider is None and isinstance(model, str) and _provider_model(model):
            provider, model = _provider_model(model)  # type: ignore[misc]
        if not isinstance(provider, str) or not isinstance(model, str):
            raise ProfileError(
                where, "`provider` and `model` are required strings (or model = 'provider/model')"
            )
        params = raw.get("params", {})
        if not isinstance(params, dict):
            raise ProfileError(f"{where}.params", "must be a table")
        for key in ("base_url", "api_key_env", "replay"):
            if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
                raise ProfileError(
                    f"{where}.{key}",
                    f"key {key!r} in {where} must be a non-empty string",
                    named=True,
                )
        if "base_url" in raw and not _is_http_url(raw["base_url"]):
            raise ProfileError(
                f"{where}.base_url",
                f"key 'base_url' in {where} is not an http(s) URL with a host "
                "(e.g. 'http://127.0.0.1:8080/v1')",
                named=True,
            )
        try:
            client = parse_client_options(raw)
        except OptionError as exc:
            raise ProfileError(f"{where}.{exc.key}", exc.message) from None
        out[pid] = Profile(
            id=pid,
            provider=provider,
            model=model,
            base_url=raw.get("base_url"),
            api_key_env=raw.get("api_key_env"),
            params=params,
            source_kind=source_kind,
            client=client,
            replay=_replay_path(raw.get("replay"), base_dir, f"{where}.replay"),
        )
    return out


def _is_http_url(value: str) -> bool:
    """Does `base_url` parse as an http(s) URL with a host? Checked when profiles load,
    so a typo is a configuration error before anything is allocated, not retries at
    run time (docs/configuration.md "LLM profiles")."""
    try:
        parts = urllib.parse.urlsplit(value.strip())
        _ = parts.port  # a port that is not a number raises here
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and " " not in value.strip()


def _replay_path(value: str | None, base_dir: str | None, where: str) -> str | None:
    """A cassette path: relative to the profiles file; absolute (or ~) in the user config."""
    if value is None:
        return None
    path = os.path.expanduser(value)
    if not os.path.isabs(path):
        if base_dir is None:
            raise ProfileError(where, "must be an absolute path in the user config file")
        path = os.path.join(base_dir, path)
    return os.path.realpath(path)


class OfflineRuntime:
    """The built-in `offline` profile: deterministic, no network, useful for tests."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def complete(
        self, prompt: str, *, system: str | None = None, options: CallOptions | None = None
    ) -> str:
        digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
        words = prompt.split()
        return msgspec.json.encode(
            {"model": self.profile.model, "prompt_sha256": digest, "words": len(words)}
        ).decode()

    def ask(
        self,
        prompt: str,
        reply_type: Any,
        *,
        system: str | None = None,
        options: CallOptions | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Any:
        """A deterministic placeholder of the reply type (its schema's simplest instance)."""
        return offline_answer(reply_type, schema)


class UnavailableRuntime:
    """A profile whose provider has no runtime here: calling it fails the stage clearly."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def ask(self, prompt: str, reply_type: Any, **_: Any) -> Any:
        return self.complete(prompt)

    def complete(self, prompt: str, **_: Any) -> str:
        key_note = ""
        if self.profile.api_key_env and not os.environ.get(self.profile.api_key_env):
            key_note = f"; {self.profile.api_key_env} is not set"
        raise RuntimeError(
            f"provider '{self.profile.provider}' of profile '{self.profile.id}' has no runtime "
            f"in this version{key_note}"
        )


def runtime_for(profile: Profile) -> OfflineRuntime | UnavailableRuntime:
    """The runtime of a profile without network services: offline, or a clear failure.

    Providers with a network runtime are built by `adapters.llm.LLMServices`, which the
    CLI wires for each run (docs/internals.md "The LLM runtime").
    """
    if profile.provider == "offline":
        return OfflineRuntime(profile)
    return UnavailableRuntime(profile)
