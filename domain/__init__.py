"""runjournal.domain package."""
