"""Probes answered in front of Django: `/healthz`, `/readyz` and `/metrics`."""
