"""LLM profiles: the built-in `offline` profile and profiles files (SEMANTICS §8).

A profile's identity is its non-secret fields; its source identity is where it was
defined (builtin | file | user-config) plus the non-secret content of its table,
never an absolute path. API keys are read from the environment only when called.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from collections.abc import Mapping
from typing import Any

import msgspec
from runjournal.domain.identity import digest_of
from runjournal.domain.redaction import is_secret_key

_PROFILE_KEYS = {"provider", "model", "base_url", "api_key_env", "params"}


class ProfileError(Exception):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class Profile(msgspec.Struct, frozen=True):
    id: str
    provider: str
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    source_kind: str = "builtin"

    def non_secret(self) -> dict[str, Any]:
        params = {k: v for k, v in self.params.items() if not is_secret_key(k)}
        return {
            "provider": self.provider,
            "model": self.model,
            "base_url": self.base_url,
            "params": params,
        }

    @property
    def digest(self) -> str:
        """profile component: the observed non-secret fields."""
        return digest_of(self.non_secret())

    @property
    def source_digest(self) -> str:
        """profile_source component: origin kind and the table's non-secret content."""
        table = {**self.non_secret(), "api_key_env": self.api_key_env}
        return digest_of({"origin": self.source_kind, "table": table})


OFFLINE = Profile(id="offline", provider="offline", model="echo-1", source_kind="builtin")


class ProfileRegistry:
    def __init__(self, profiles: Mapping[str, Profile]) -> None:
        self._profiles = dict(profiles)

    def ids(self) -> list[str]:
        """Every profile id this registry knows, sorted."""
        return sorted(self._profiles)

    def get(self, profile_id: str) -> Profile:
        try:
            return self._profiles[profile_id]
        except KeyError:
            known = ", ".join(sorted(self._profiles)) or "none"
            raise ProfileError(
                "profile", f"unknown profile '{profile_id}' (known: {known})"
            ) from None

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
        profiles.update(_parse_profiles(doc.get("profiles", {}), "file", "profiles"))
        return cls(profiles)


def _parse_profiles(table: Any, source_kind: str, prefix: str) -> dict[str, Profile]:
    if not isinstance(table, dict):
        raise ProfileError(prefix, "expected [profiles.<id>] tables")
    out: dict[str, Profile] = {}
    for pid, raw in table.items():
        where = f"{prefix}.{pid}"
        if not isinstance(raw, dict):
            raise ProfileError(where, "must be a table")
        unknown = set(raw) - _PROFILE_KEYS
        if unknown:
            raise ProfileError(f"{where}.{sorted(unknown)[0]}", "unknown key")
        if not isinstance(raw.get("provider"), str) or not isinstance(raw.get("model"), str):
            raise ProfileError(where, "`provider` and `model` are required strings")
        params = raw.get("params", {})
        if not isinstance(params, dict):
            raise ProfileError(f"{where}.params", "must be a table")
        out[pid] = Profile(
            id=pid,
            provider=raw["provider"],
            model=raw["model"],
            base_url=raw.get("base_url"),
            api_key_env=raw.get("api_key_env"),
            params=params,
            source_kind=source_kind,
        )
    return out


class OfflineRuntime:
    """The built-in `offline` profile: deterministic, no network, useful for tests."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def complete(self, prompt: str, *, system: str | None = None) -> str:
        digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]
        words = prompt.split()
        return msgspec.json.encode(
            {"model": self.profile.model, "prompt_sha256": digest, "words": len(words)}
        ).decode()


class UnavailableRuntime:
    """A profile whose provider has no runtime here: calling it fails the stage clearly."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def complete(self, prompt: str, *, system: str | None = None) -> str:
        key_note = ""
        if self.profile.api_key_env and not os.environ.get(self.profile.api_key_env):
            key_note = f"; {self.profile.api_key_env} is not set"
        raise RuntimeError(
            f"provider '{self.profile.provider}' of profile '{self.profile.id}' has no runtime "
            f"in this version{key_note}"
        )


def runtime_for(profile: Profile) -> OfflineRuntime | UnavailableRuntime:
    if profile.provider == "offline":
        return OfflineRuntime(profile)
    return UnavailableRuntime(profile)
