"""Verdicts: their vocabulary (status, action, tier, result), the shared store and the record."""
