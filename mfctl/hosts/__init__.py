"""Host-side tools: command builders and parsers (text in, typed data out, typed errors)."""
