"""A body worker process of the proxy (``proxy/http/lane.py``): ``python -m
proxy.http.body_worker <fd>``. A module of its own so that what the worker sends back is
pickled as ``proxy.http.lane``'s classes, not ``__main__``'s."""

from __future__ import annotations

import sys

from proxy.http.lane import serve

if __name__ == "__main__":
    serve(int(sys.argv[1]))
