"""In the kernel: the doctor's checks against the connected cluster, the storage probe and the all-reduce bench."""
