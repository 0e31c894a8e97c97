"""In the kernel: runs -- starting one (``train``), following and stopping it (``run``, ``stream``), finding runs on the
cluster (``catalog``), warm groups (``warm``), and what a run is made of (the cell, its resources, Ray Train's
config, where its checkpoints go, the error it ends with, this machine's journal of it)."""
