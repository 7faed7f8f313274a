#!/bin/bash
# slurmkit sweep job: deep (heavy-tier) health checks on node1.
# Submitted by `slurmkit sweep` (run 20260101T000000Z-42); preemptible, one node, exclusive.
# Results go to the verdict store; see docs/sweeps.md.
set -u
exec /opt/slurmkit/bin/python -m slurmkit.cli.main sweep run-node --exit-zero --node node1 --run-id 20260101T000000Z-42 --gpu-model h100 --config /etc/slurmkit/slurmkit.yaml
