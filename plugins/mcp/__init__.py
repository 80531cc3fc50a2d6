"""MCP servers as tool plugins: a server's tools become toolgym tools (see README.md)."""
