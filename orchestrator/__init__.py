"""orch: deploy and verify vLLM speculative-decoding servers on Proxmox GPU containers."""

__version__ = "0.1.0"
