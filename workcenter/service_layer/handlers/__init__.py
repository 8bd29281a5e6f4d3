"""The command handlers: each loads its aggregates, decides with the domain and saves
the result as one unit of work."""
