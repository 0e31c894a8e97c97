"""In the kernel: clusters -- where the head runs and how this kernel reaches it: the ``Cluster`` handle, the embedded
head on this machine, a KubeRay RayCluster (its API calls, state, pods and doctor checks), the Ray Client session and
what it prints."""
