"""The configuration's HTTP API: its ninja router, and the error type and schemas both API
routers share."""
