"""The manifest self-check lives in the application layer (app/manifest_check.py)."""

from runjournal.app.manifest_check import ManifestMismatch, check_run_manifest, manifest_mismatch

__all__ = ["ManifestMismatch", "check_run_manifest", "manifest_mismatch"]
