"""On the cluster: the head's actors (the run registry, each run's launcher and metrics sink, a warm group's
mailbox), what wraps the cell on each Ray Train worker, and the doctor's node tasks. It imports only
``_shared``, ``_remote`` and ``nccl`` -- no IPython, widgets, plotly or Kubernetes client, nothing of the kernel's
side -- so it runs on the image's Python (tests/unit/test_house.py holds it). The kernel reaches it through
``_client``."""
