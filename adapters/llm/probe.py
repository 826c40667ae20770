"""`runjournal check --online`: does each profile's endpoint answer its models route?

One `GET <base_url>/models` through the official `openai` client (`anthropic`'s for an
`anthropic` profile; no retries, short timeouts), before anything is spent. A refused
connection, an error status or a model the server does not list is one problem line
naming the profile; the server's text is scrubbed of every known secret first
(docs/operations.md "`check`").
"""

from __future__ import annotations

from collections.abc import Mapping

from runjournal.adapters.profiles import Profile
from runjournal.adapters.secrets import remember_secrets
from runjournal.domain.redaction import redact_text, scrub_known

PROBE_TIMEOUT_S = 10.0
_UNKEYED = "unused"  # an OpenAI-compatible server without auth still wants a header


def probe_profile(
    profile: Profile, environ: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S
) -> str | None:
    """None when the endpoint lists its models (and `profile.model` among them, when
    it lists any); else one line saying what went wrong."""
    remember_secrets(profile.secrets(environ))  # scrubbed from whatever the server says

    default = "https://api.anthropic.com" if profile.provider == "anthropic" else None
    shown = redact_text(profile.base_url or default or "https://api.openai.com/v1")
    env = profile.key_env()
    key = environ.get(env) if env else None
    if key is None and profile.base_url is None:
        return f"profile '{profile.id}' ({shown}): environment variable {env} is not set"
    if profile.provider == "anthropic":
        try:
            import anthropic as openai  # the same client surface: models, errors, Timeout
        except ImportError:
            return (
                f"profile '{profile.id}' ({shown}): provider 'anthropic' needs the anthropic "
                "extra (pip install 'runjournal[anthropic]')"
            )
        client_class = openai.Anthropic
    else:
        import openai  # lazy: only `check --online` pays for the import here

        client_class = openai.OpenAI
    client = client_class(
        api_key=key or _UNKEYED,
        base_url=profile.base_url,
        max_retries=0,
        timeout=openai.Timeout(timeout, connect=timeout),
    )
    try:
        listed = [m.id for m in client.models.list()]
    except openai.APIStatusError as exc:
        text = scrub_known(" ".join(str(exc.message).split()))[:200]
        return f"profile '{profile.id}' ({shown}): models route answered {exc.status_code}: {text}"
    except openai.APIError as exc:
        text = scrub_known(" ".join(str(exc).split()))[:200]
        return f"profile '{profile.id}' ({shown}): no answer from the models route: {text}"
    finally:
        client.close()
    if listed and profile.model not in listed:
        some = ", ".join(listed[:5]) + (", …" if len(listed) > 5 else "")
        return (
            f"profile '{profile.id}' ({shown}): the server does not list model "
            f"{profile.model!r} (it lists: {some})"
        )
    return None
