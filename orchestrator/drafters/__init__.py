"""What orch knows about drafter models: DFlash rules, published profiles, model files."""
