"""Claude Code hooks: the process boundary, the handlers, the payload, the settings install.

Empty on purpose: every hook has a cold-start budget and imports only the modules it needs (docs/STYLE.md).
"""
