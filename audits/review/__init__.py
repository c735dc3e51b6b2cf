"""Review work: verdict pages, the review queue, alert rules and their tasks (imports the core
only)."""
