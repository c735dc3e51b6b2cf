"""The HTTP API: ninja routers, the export, the HTTP stream endpoint (imports the core only)."""
