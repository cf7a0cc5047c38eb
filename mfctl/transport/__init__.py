"""Transports: SSH (paramiko, pooled, parallel fan-out) and byte streams for the OCS."""
