"""What stands between the network and the HTTP surfaces (the proxy, a node's admin API):
bearer tokens with topic and operation rights (``tokens.py``), and the guard that checks them
and bounds each request before any work is done (``guard.py``)."""
