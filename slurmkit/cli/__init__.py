"""Thin click commands. Each subcommand's module is imported only when it runs, so
``--help`` and the prolog never pay for code they don't use (and never import torch)."""
