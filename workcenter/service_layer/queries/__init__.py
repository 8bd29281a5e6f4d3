"""The reads: from the read models where one exists, else from the event store."""
