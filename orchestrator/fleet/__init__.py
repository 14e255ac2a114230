"""The bodies of the commands that work on a fleet's containers: each turns loaded
inputs into one document (and an exit code) through the `connect` it is given, so a
test drives it through the in-memory transport and the CLI only parses and prints."""
