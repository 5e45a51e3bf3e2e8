"""Path leases: which agent may edit which files (docs/leases.md)."""
