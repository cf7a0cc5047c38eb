"""Typer command groups. Commands parse, call a service, render — nothing else.

Heavy modules (paramiko, numpy, pyserial, pydantic models) are imported inside the
command functions so that ``mfctl --help`` stays fast.
"""
