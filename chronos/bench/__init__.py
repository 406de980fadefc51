"""Benchmarks: chronos beside a bare Kafka relay and a Redis sorted-set delay queue.

Every load generator and observer runs in a process of its own (spawned, never forked: librdkafka
threads do not survive a fork), so the node under test competes only with what a real
deployment would also run on the machine.
"""
