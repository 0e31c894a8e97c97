"""On the head, in raynb's agent (a Ray Job): raynb's agent: a Ray Job on the cluster's head that does, for a kernel
whose Python or Ray is not the cluster's, what that kernel would do over Ray Client -- it makes the seam's calls
(``_client/cluster_side.py``) with the cluster's own Ray, and answers them over HTTP (``server.py``). Started by the
kernel through the Jobs API (``_client/agent_job.py``); runs ``python -m raynb._agent``."""
