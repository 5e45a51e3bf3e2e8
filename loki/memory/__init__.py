"""Error memory: the record log, its search index, the hints the hooks read, compaction.

Empty on purpose: the hooks have a cold-start budget and import only the modules they need (docs/STYLE.md).
"""
