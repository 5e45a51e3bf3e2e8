"""The 3-strike protocol: strike files, their keys and tiers, the hot-path reader, what counts as a call.

Empty on purpose: the PreToolUse hook has a cold-start budget and imports only the modules it needs
(docs/STYLE.md).
"""
