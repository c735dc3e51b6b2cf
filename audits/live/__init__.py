"""Live pages over WebSockets: consumers and routes, the ingest consumer, the feed hub, the
live fragments and the Live page (imports the core only)."""
