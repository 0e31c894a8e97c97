"""On the head, in raynb's agent (a Ray Job): ``python -m raynb._agent``: the agent's Ray Job entrypoint (see
``server.py``)."""

from .server import main

if __name__ == "__main__":
    main()
