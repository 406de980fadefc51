"""The pipeline's jobs: schedule, audit, backlog (one module each) and what they share."""
