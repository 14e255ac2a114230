"""`orch inventory discover`: read a Proxmox VE cluster through one of its hosts
and write an inventory for it (commands, parsers, the YAML writer, the runner)."""
