"""Backend-agnostic core: YAML loading with line numbers and schema validation."""
