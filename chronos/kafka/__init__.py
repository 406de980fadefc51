"""Kafka, behind chronos' own seams: every client built in one place (``clients.py``), one
classification of errors (``errors.py``), the publisher seam and its drivers (``publisher.py``,
``publishers/``), and topic administration (``admin.py``)."""
