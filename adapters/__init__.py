"""runjournal.adapters package."""
