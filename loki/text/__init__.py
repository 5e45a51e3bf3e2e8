"""What loki does to text it did not write: redaction (redact.py), reading errors out of tool output
(errorscan.py), escaping for a terminal or a table (textsafe.py), and the lazily compiled patterns they share
(lazyre.py). The ground floor: it imports nothing of loki's but errors, clock and config.

Empty on purpose: every hook and CLI command has a cold-start budget and imports only the modules it needs
(docs/STYLE.md).
"""
