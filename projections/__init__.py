"""runjournal.projections package."""
