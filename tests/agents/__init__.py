"""End-to-end tests with the real agent CLIs (installed by the test setup into .cache/agents/)."""
