"""The node's durable store: the delivery schedule, the id index and progress metadata."""
