"""The checks: fast tier :mod:`.gpu` (through the GPU backend) and :mod:`.host`; heavy tier
:mod:`.heavy` (with the collective probe :mod:`.collective`); Xid events (:mod:`.xid`, the
table and judgement, over :mod:`.kmsg`, the kernel-log reader)."""
