"""runjournal: resumable, explainable, auditable document pipelines."""

__version__ = "0.1.0"
