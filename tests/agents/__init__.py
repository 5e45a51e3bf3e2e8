"""Real coding agents in the test suite: scripted model servers on loopback, the pinned agent CLIs
installed into an ignored cache directory, and helpers that run them (tests/agents/README.md)."""
