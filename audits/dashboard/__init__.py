"""The dashboard pages: list, detail, trends and tuning views and their queries (imports the
core only)."""
