"""What orch knows about drafter models: kinds and their rules, published profiles, model files."""
