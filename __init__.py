"""runjournal: resumable, explainable, auditable document pipelines."""

__version__ = "0.2.0"
