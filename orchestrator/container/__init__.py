"""What orch does on a container, one module per concern (shell toolkit, lock, journal,
release, server, gpu, status, audit, probe, host): each holds the pure builders of its
remote scripts, the parsers of what they print, and the small class or functions that
run them over a transport. Imports only transport/, layout, errors and deadline.
"""
