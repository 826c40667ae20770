"""`settled_heap` lives in the application layer (app/heap.py); re-exported here."""

from runjournal.app.heap import settled_heap

__all__ = ["settled_heap"]
