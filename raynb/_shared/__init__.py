"""In any process: pure code any process may import -- the kernel, the head's actors, each Train worker: the run's
picture and its series, FLOPs and cost arithmetic, a run's spec, the workers' environment. Standard library only at
import time, and nothing of raynb outside this folder (tests/unit/test_house.py holds both)."""
