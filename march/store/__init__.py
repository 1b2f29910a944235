"""Durable state behind one small interface (``base.Store``): sqlite (embedded), memory (tests)."""
