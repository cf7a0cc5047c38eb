"""Provisioning: desired vs. actual host state → plan → apply → verify (DESIGN §3)."""
