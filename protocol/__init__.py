"""Wire formats spoken or written by the control plane (ACP, JSONL transcripts)."""
