"""What producing a due message means in either mode: its job, and the one dead-letter policy.

Words, one meaning each: a *request* is an add or cancel on the inner topic; a *delivery* is one
occurrence of a stored message produced to its target topic; a *publisher* is a Kafka producer
(``chronos/kafka/publisher.py``); a *dead letter* is a record on the dead-letter topic that says
why its message could not be delivered (``deadletter.py``).
"""
