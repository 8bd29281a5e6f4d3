"""The hash chain over the stored events and the proof of the history (ADR-0028)."""
