"""runjournal.cli package."""
