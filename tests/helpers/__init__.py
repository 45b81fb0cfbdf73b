"""Helpers shared by several test modules (no test module imports another: what two of them need lives here)."""
