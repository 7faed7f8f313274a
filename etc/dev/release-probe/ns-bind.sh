#!/usr/bin/env bash
# The kernel behaviour behind rootfs.namespace_cpu(), without Slurm (as root):
#   bash etc/dev/release-probe/ns-bind.sh            # in this machine's initial namespace
#   unshare -m --propagation private bash etc/dev/release-probe/ns-bind.sh
#   taskset -c 0 unshare -m --propagation private bash etc/dev/release-probe/ns-bind.sh
# Does what job_container/tmpfs does for each job: a private bind of the job's directory,
# a child in a new mount namespace, and a bind of that namespace's file onto <dir>/.ns.
# Prints how many of 20 binds the kernel accepted (measured 2026-12-02, kernel 6.18, 2 CPUs:
# 20/20, 7, 8 and 11 of 20, 20/20 on either CPU).
set -u
d=$(mktemp -d /var/tmp/sk-ns-bind.XXXXXX)
mount --bind "$d" "$d" && mount --make-private "$d"
ok=0
for i in $(seq 1 20); do
  mkdir -p "$d/$i" && mount --bind "$d/$i" "$d/$i" && mount --make-rprivate "$d/$i" && touch "$d/$i/.ns"
  unshare -m sleep 2 &
  c=$!
  sleep 0.4
  mount --bind "/proc/$c/ns/mnt" "$d/$i/.ns" 2>/dev/null && ok=$((ok + 1))
  umount "$d/$i/.ns" 2>/dev/null
  umount "$d/$i"
done
wait
umount "$d" && rm -rf "$d"
echo "binds accepted: $ok of 20"
