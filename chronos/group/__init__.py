"""Replica groups: one elected master delivers in fenced Kafka transactions, backups follow.

Why this works without sharing a store (the argument every module here relies on):

* The master moves its push frontier F and takes the *cut* O, the inner offsets of every add
  written before that move (``schedule/frontier.py``). An add below O was placed while the frontier
  was lower, so its slot is <= F exactly when its due time is; an add at or above O lands after F.
* One delivery transaction produces everything with a slot in (previous F, F] *and* the
  progress record ``(term, F, O, next occurrences of the repeats it delivered)`` to the group's
  compacted progress topic. Kafka commits both or neither.
* So the committed progress alone says what was delivered: an add is delivered exactly when its
  offset is below O and its due time <= F (repeats: the occurrence the record names). Every
  replica knows each add's offset and due time, so none needs the master's store.
* A backup stores each add at its due time (``placement.ReplicaPlacement``), remembers where
  each add came from (the arrivals column) and applies committed records; on takeover it fences
  the old master (``init``), reads the progress topic to its end, moves every add it holds at or
  above O and behind F to F + 1 (``ReplicaStore.relocate_uncovered``), and delivers from F.

Election is a consumer group on a one-partition topic: the member assigned partition 0 should
be master. An assignment is not a lease (a frozen master still believes it holds it); safety
comes from the transactional fencing, the group only picks who tries. The group's session (6 s
at least on Apache Kafka) is too slow to notice a dead master, so replicas also watch the
master's commits and take over when they stop (``master_watch.py``); fencing makes that as
safe as the election.
"""
