"""slurmkit: the operations layer between Slurm and PyTorch on GPU clusters.

The package is split so that the node-side pieces (prolog, epilog, sweeps, reports)
import nothing heavier than click, PyYAML, psutil and Jinja2. torch and triton are
only imported inside the code that runs in a training job (``[train]`` extra).
"""

__version__ = "0.1.0"
