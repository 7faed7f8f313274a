"""Node hardware interfaces read by several layers (sysfs)."""
