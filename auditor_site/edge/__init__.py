"""The server's edge guards: what refuses a request before the application reads it (head
and body limits, API keys from the head, the WebSocket same-origin check)."""
