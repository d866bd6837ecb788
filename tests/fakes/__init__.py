"""In-memory test doubles."""
