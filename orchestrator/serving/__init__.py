"""What a vLLM server of a given version does with what orch sends it."""
