"""What `orch` prints, by what it prints: `screen` (safe text, fitted tables, JSON),
`live` (a run as it goes), `run` (a run's report), `tables` (the read-only commands)."""
