"""Fast-tier check implementations: :mod:`.gpu` (through the GPU backend) and :mod:`.host`."""
