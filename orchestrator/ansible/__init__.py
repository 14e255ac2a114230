"""`orch inventory import ansible`: an Ansible inventory (YAML or INI) read as
Ansible reads it, then mapped onto orch's inventory, saying what did not map."""
