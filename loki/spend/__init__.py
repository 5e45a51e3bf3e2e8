"""What the team spends: the meter that reads an agent's usage, the price table, and the usage report
(docs/spend.md)."""
